"""Metrics on the local Ray cluster: a Serve app over shard actors takes adds, searches, a bad request and
two ingests (the scripted extraction model fails the first with HTTP 500, then answers); Ray's Prometheus
endpoint (the node's metrics export port) then carries the ``memcluster_*`` series with the expected
counts and labels (the vector-store flush and keyword commit histograms among them), and no label key or
value is a user id."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from memclient import MemoryClient
from testkit.scripted_llm import Reply, ScriptedLLM, tool_call
from tests.prometheus import Series, total, wait_for
from tests.serve_apps.ray_app import serve_memcluster

pytestmark = pytest.mark.ray

APP, KEY = "metrics-app", "metrics-app-key-0123456789"
NAMESPACE, PREFIX = "memcluster-metrics-test", "/metrics-test"
USERS = ("mona-1729", "otto-4242")
FACT = "The user keeps bees on the roof."


@pytest.fixture(scope="module")
def cluster(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:


    script = [Reply(status=500, body={"error": {"message": "scripted outage", "type": "server_error"}}),
              Reply(tool_calls=(tool_call("memory_add", {"memory": FACT, "topics": ["bees"]}),))]
    with ScriptedLLM(script) as extractor:
        settings = {
            "data_dir": str(tmp_path_factory.mktemp("metrics")), "shards": 2, "namespace": NAMESPACE,
            "embedder": {"kind": "hashing", "dim": 256}, "api_keys": {APP: KEY},
            "extractor": {"base_url": extractor.base_url, "model": "scripted-extractor", "job_timeout_s": 20},
        }
        with serve_memcluster(serve_port, "memmetrics", PREFIX, settings) as base:
            yield {"base": base, "extractor": extractor}


def test_prometheus_series_after_traffic(cluster: dict[str, Any]) -> None:
    base = cluster["base"]
    with MemoryClient(base, api_key=KEY, timeout=60) as client:
        for i, user in enumerate(USERS):
            client.add(APP, user, f"{user} likes tea number {i}")
        client.add(APP, USERS[0], "The user's cat is called Pixel.")
        for user in USERS:
            assert client.search(APP, user, "tea")
        messages = [{"role": "user", "content": "I keep bees on the roof."}, {"role": "assistant", "content": "Nice!"}]
        failed = client.ingest(APP, USERS[1], "s1", messages, wait=30)
        assert failed.status == "failed", failed.data
        done = client.ingest(APP, USERS[1], "s1", messages, wait=30)
        assert done.status == "done", done.data
    bad = httpx.post(f"{base}/v1/apps/{APP}/users/{USERS[0]}/memories/search", json={"query": 5},
                     headers={"Authorization": f"Bearer {KEY}"})
    assert bad.status_code == 422

    search = "/v1/apps/{app}/users/{user}/memories/search"
    expected = [
        ("memcluster_writes_total", {"app": APP, "op": "add", "source": "api"}, 3.0),
        ("memcluster_writes_total", {"app": APP, "op": "add", "source": "extraction"}, 1.0),
        ("memcluster_search_tokens_count", {"app": APP}, 2.0),
        ("memcluster_http_requests_total",
         {"app": APP, "route": "/v1/apps/{app}/users/{user}/memories", "method": "POST", "status_class": "2xx"}, 3.0),
        ("memcluster_http_requests_total", {"app": APP, "route": search, "status_class": "2xx"}, 2.0),
        ("memcluster_http_requests_total", {"app": APP, "route": search, "status_class": "4xx"}, 1.0),
        ("memcluster_http_request_duration_ms_count", {"app": APP, "route": search}, 3.0),
        ("memcluster_search_part_duration_ms_count", {"app": APP, "part": "shard"}, 2.0),
        ("memcluster_search_part_duration_ms_count", {"app": APP, "part": "encode"}, 2.0),
        ("memcluster_search_hits_count", {"app": APP}, 2.0),
        ("memcluster_jobs_total", {"app": APP, "status": "queued"}, 2.0),
        ("memcluster_jobs_total", {"app": APP, "status": "running"}, 2.0),
        ("memcluster_jobs_total", {"app": APP, "status": "failed", "reason": "extractor_error"}, 1.0),
        ("memcluster_jobs_total", {"app": APP, "status": "done"}, 1.0),
        ("memcluster_job_duration_ms_count", {"app": APP}, 2.0),
        ("memcluster_extractor_call_duration_ms_count", {"app": APP}, 2.0),
        ("memcluster_extractor_errors_total", {"app": APP, "kind": "http"}, 1.0),
    ]
    gauges = ["memcluster_queue_depth", "memcluster_cursor_lag_seconds", "memcluster_shard_entries",
              "memcluster_shard_keyword_docs", "memcluster_jobs_running"]

    def missing(series: Series) -> list[str]:
        left = [f"{n}{w}: {total(series, n, **w)} != {v}" for n, w, v in expected if total(series, n, **w) != v]
        # each write flushes the shard's Qdrant Edge store (4 here; other modules' shards add to it) and
        # commits its keyword index (at once, or in one background commit when commits are deferred)
        floors = [("memcluster_vector_flush_ms_count", {"engine": "qdrant_edge"}, 4.0),
                  ("memcluster_keyword_commit_ms_count", {}, 1.0)]
        lag_shards = {dict(labels)["shard"] for labels in series.get("memcluster_cursor_lag_seconds", {})}
        left += [f"memcluster_cursor_lag_seconds of shard {k}" for k in ("0", "1") if k not in lag_shards]
        return left + [g for g in gauges if not series.get(g)] + [
            f"{n}{w}: {total(series, n, **w)} < {v}" for n, w, v in floors if total(series, n, **w) < v]

    series = wait_for(missing)
    assert total(series, "memcluster_extractor_errors_total", app=APP, kind="timeout") == 0  # others time out
    # shard-level series are labelled by shard only: other modules' shards of the session add to them
    assert total(series, "memcluster_shard_starts_total", shard="0") >= 1
    assert total(series, "memcluster_shard_starts_total", shard="1") >= 1
    assert {dict(labels)["shard"] for labels in series["memcluster_cursor_lag_seconds"]} >= {"0", "1"}
    for name, rows in series.items():
        for labels in rows:
            keys = {k for k, _ in labels}
            assert not keys & {"user", "user_id", "session"}, (name, labels)
            assert not any(u in v for _, v in labels for u in USERS), (name, labels)
