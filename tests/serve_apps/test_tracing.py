"""OpenTelemetry traces with the SDK's in-memory exporter, over real HTTP (uvicorn) and the in-process
LocalShardBackend (the context reaches the shard through ``asyncio.to_thread`` and the job worker
through the captured ingest context; across a Ray actor it travels as ``traceparent`` in
``ShardCore.traced``). One ingest is one connected trace: HTTP request → ingest → job → extractor
call → policy → upsert_memory; search and delete give search_memory and delete_memory. No span
attribute carries the user id; with tracing off a span is the shared null context."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memclient import MemoryClient
from memcore import tracing
from testkit.scripted_llm import ScriptedLLM, tool_call
from tests.live_server import LiveServer

APP, KEY, USER = "trace-app", "trace-app-key-0123456789", "tracy-31337"
FACT = "The user sails a red dinghy."


@pytest.fixture
def traced(tmp_path: Any) -> Iterator[tuple[MemoryClient, InMemorySpanExporter]]:
    from actors.backend import LocalShardBackend
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder
    from serve_apps.http_app import attach, create_app

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    with ScriptedLLM([tool_call("memory_add", {"memory": FACT, "topics": ["sailing"]})]) as llm:
        settings = Settings(data_dir=tmp_path, shards=2, api_keys={APP: KEY},
                            extractor={"base_url": llm.base_url, "model": "scripted", "job_timeout_s": 20})
        backend = LocalShardBackend(settings, embedder=HashingEmbedder(dim=256))
        app = create_app()
        attach(app, backend, settings)
        try:
            with LiveServer(app) as live, MemoryClient(live.url, api_key=KEY, timeout=30) as client:
                yield client, exporter
        finally:
            backend.close()
            tracing.disable()


def by_trace(exporter: InMemorySpanExporter, root_name: str, timeout_s: float = 10.0) -> list[ReadableSpan]:
    """The finished spans of the one trace whose root is ``root_name``. The server's request span ends
    after the response has been sent, so the client can hold the answer before the span is exported:
    wait for it (bounded) rather than read the exporter once."""
    deadline = time.monotonic() + timeout_s
    while True:
        spans = exporter.get_finished_spans()
        roots = [s for s in spans if s.name == root_name]
        if roots or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    assert len(roots) == 1, [s.name for s in spans]
    trace_id = roots[0].context.trace_id
    return [s for s in spans if s.context.trace_id == trace_id]


def parent_name(span: ReadableSpan, spans: list[ReadableSpan]) -> str | None:
    ids = {s.context.span_id: s.name for s in spans}
    return ids.get(span.parent.span_id) if span.parent is not None else None


def test_one_ingest_is_one_connected_trace(traced: tuple[MemoryClient, InMemorySpanExporter]) -> None:
    client, exporter = traced
    job = client.ingest(APP, USER, "s1", [{"role": "user", "content": "I sail a red dinghy."},
                                          {"role": "assistant", "content": "Lovely."}], wait=20)
    assert job.status == "done", job.data
    spans = by_trace(exporter, "POST /v1/apps/{app}/users/{user}/sessions/{session}/events")
    names = {s.name for s in spans}
    chain = {"memcluster.ingest": "POST /v1/apps/{app}/users/{user}/sessions/{session}/events",
             "memcluster.job": "memcluster.ingest", "memcluster.extractor_call": "memcluster.job",
             "memcluster.policy": "memcluster.job", "upsert_memory": "memcluster.policy"}
    assert set(chain) <= names, names
    for child, parent in chain.items():
        assert {parent_name(s, spans) for s in spans if s.name == child} == {parent}, child
    upsert = next(s for s in spans if s.name == "upsert_memory")
    assert upsert.attributes is not None and upsert.attributes["gen_ai.operation.name"] == "upsert_memory"
    assert upsert.attributes["memcluster.app"] == APP

    exporter.clear()
    hits = client.search(APP, USER, "dinghy")
    assert hits and FACT in hits[0].entry.text
    spans = by_trace(exporter, "POST /v1/apps/{app}/users/{user}/memories/search")
    search = [s for s in spans if s.name == "search_memory"]
    assert len(search) == 1 and parent_name(search[0], spans).startswith("POST ")  # type: ignore[union-attr]

    exporter.clear()
    client.delete(APP, USER, hits[0].entry.id)
    assert "delete_memory" in {s.name for s in exporter.get_finished_spans()}
    for s in exporter.get_finished_spans():
        assert all(USER not in str(v) for v in (s.attributes or {}).values()), s.name


def test_tracing_off_is_a_shared_null_context() -> None:
    tracing.disable()
    assert not tracing.enabled()
    assert tracing.span("search_memory", memcluster__app="a") is tracing.span("upsert_memory")
    assert tracing.carrier() is None and tracing.capture() is None


def test_one_log_line_per_request_and_per_job(traced: tuple[MemoryClient, InMemorySpanExporter],
                                              caplog: pytest.LogCaptureFixture) -> None:
    import json
    import logging

    from memcore.telemetry import EVENTS

    client, _ = traced
    with caplog.at_level(logging.INFO, logger=EVENTS.name):
        job = client.ingest(APP, USER, "s2", [{"role": "user", "content": "I sail a red dinghy."}], wait=20)
        client.search(APP, USER, "dinghy")
        deadline = time.monotonic() + 10  # the request line is written once the response has been sent
        while (sum('"event":"request"' in r.getMessage() for r in caplog.records if r.name == EVENTS.name) < 2
               and time.monotonic() < deadline):
            time.sleep(0.02)
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == EVENTS.name]
    requests = [x for x in lines if x["event"] == "request"]
    jobs = [x for x in lines if x["event"] == "job"]
    assert [r["route"] for r in requests] == ["/v1/apps/{app}/users/{user}/sessions/{session}/events",
                                              "/v1/apps/{app}/users/{user}/memories/search"]
    assert all(r["app"] == APP and r["status"] < 300 and r["request_id"] and r["duration_ms"] > 0 for r in requests)
    assert len(jobs) == 1 and jobs[0]["job_id"] == job.job_id and jobs[0]["status"] == job.status
    text = "\n".join(r.getMessage() for r in caplog.records if r.name == EVENTS.name)
    assert "dinghy" not in text and USER not in text
