"""OpenTelemetry traces with the SDK's in-memory exporter, over real HTTP (uvicorn) and the in-process
LocalShardBackend (the context reaches the shard through ``asyncio.to_thread`` and the job worker
through the captured ingest context; across a Ray actor it travels as ``traceparent`` in
``ShardCore.traced``). One ingest is one connected trace: HTTP request → ingest → job → extractor
call → policy → upsert_memory; a search is request → search_memory → shard_call → shard.search →
vector_search and keyword_search, its query embedding under search_memory (the ingress embeds) or
under shard.search (the shard embeds); delete gives delete_memory. No span
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


@pytest.fixture(params=["shard-embeds"])
def traced(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[tuple[MemoryClient, InMemorySpanExporter]]:
    """The service over HTTP; ``param`` "ingress-embeds" gives the ingress a query embedder (production's
    default), "shard-embeds" leaves the query embedding to the shard."""
    from actors.backend import LocalShardBackend
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder
    from serve_apps.http.app import attach, create_app

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    with ScriptedLLM([tool_call("memory_add", {"memory": FACT, "topics": ["sailing"]})]) as llm:
        settings = Settings(data_dir=tmp_path, shards=2, api_keys={APP: KEY},
                            extractor={"base_url": llm.base_url, "model": "scripted", "job_timeout_s": 20})
        backend = LocalShardBackend(settings, embedder=HashingEmbedder(dim=256))
        app = create_app()
        attach(app, backend, settings,
               HashingEmbedder(dim=256) if request.param == "ingress-embeds" else None)
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
    assert_search_tree(exporter, ingress_embeds=False)

    exporter.clear()
    client.delete(APP, USER, hits[0].entry.id)
    assert "delete_memory" in {s.name for s in exporter.get_finished_spans()}
    for s in exporter.get_finished_spans():
        assert all(USER not in str(v) for v in (s.attributes or {}).values()), s.name


SEARCH_ROOT = "POST /v1/apps/{app}/users/{user}/memories/search"


def assert_search_tree(exporter: InMemorySpanExporter, *, ingress_embeds: bool) -> None:
    """One search is one trace: request → search_memory → (embed in the ingress) → shard_call →
    shard.search → (embed in the shard) → vector_search, keyword_search; no query text, no user."""
    spans = by_trace(exporter, SEARCH_ROOT)
    names = [s.name for s in spans]
    for once in ("search_memory", "memcluster.embed", "memcluster.shard_call", "memcluster.shard.search",
                 "memcluster.vector_search", "memcluster.keyword_search"):
        assert names.count(once) == 1, (once, names)
    chain = {"search_memory": SEARCH_ROOT, "memcluster.shard_call": "search_memory",
             "memcluster.shard.search": "memcluster.shard_call",
             "memcluster.embed": "search_memory" if ingress_embeds else "memcluster.shard.search",
             "memcluster.vector_search": "memcluster.shard.search",
             "memcluster.keyword_search": "memcluster.shard.search"}
    for child, parent in chain.items():
        assert {parent_name(s, spans) for s in spans if s.name == child} == {parent}, child
    attrs = {s.name: dict(s.attributes or {}) for s in spans}
    assert attrs["search_memory"]["gen_ai.operation.name"] == "search_memory"
    assert attrs["search_memory"]["memcluster.app"] == APP and attrs["search_memory"]["gen_ai.retrieval.top_k"] == 10
    assert attrs["memcluster.embed"]["gen_ai.operation.name"] == "embeddings"
    assert attrs["memcluster.embed"]["gen_ai.embeddings.dimension.count"] == 256
    assert attrs["memcluster.vector_search"]["db.system.name"] == "qdrant"
    assert attrs["memcluster.keyword_search"]["db.system.name"] == "tantivy"
    assert attrs["memcluster.vector_search"]["memcluster.results"] >= 1
    assert attrs["memcluster.keyword_search"]["memcluster.results"] >= 1
    assert attrs["memcluster.shard.search"]["memcluster.shard"] in (0, 1)
    for s in spans:
        assert all(USER not in str(v) and "dinghy" not in str(v) for v in (s.attributes or {}).values()), s.name


@pytest.mark.parametrize("traced", ["ingress-embeds"], indirect=True)
def test_search_spans_when_the_ingress_embeds(traced: tuple[MemoryClient, InMemorySpanExporter]) -> None:
    client, exporter = traced
    client.add(APP, USER, FACT)
    exporter.clear()
    hits = client.search(APP, USER, "dinghy")
    assert hits and FACT in hits[0].entry.text
    assert_search_tree(exporter, ingress_embeds=True)


def test_an_agent_tool_search_is_a_search_memory_span(traced: tuple[MemoryClient, InMemorySpanExporter]) -> None:
    client, exporter = traced
    client.add(APP, USER, FACT)
    exporter.clear()
    result = client.call_tool(APP, USER, "memory_search", {"query": "dinghy"})
    assert result["count"] >= 1
    spans = by_trace(exporter, "POST /v1/apps/{app}/users/{user}/tools/{name}")
    search = [s for s in spans if s.name == "search_memory"]
    assert len(search) == 1 and search[0].attributes is not None
    assert search[0].attributes["memcluster.app"] == APP
    assert {parent_name(s, spans) for s in spans if s.name == "memcluster.vector_search"} <= {
        "memcluster.shard.search", "search_memory"}


def test_tracing_off_is_a_shared_null_context() -> None:
    tracing.disable()
    assert not tracing.enabled()
    assert tracing.span("search_memory", memcluster__app="a") is tracing.span("upsert_memory")
    null = tracing.span("memcluster.shard_call")
    assert tracing.search_span("a", 10, True) is null and tracing.embed_span(object()) is null
    assert tracing.store_span("memcluster.vector_search", "qdrant", "search", memcluster__pool=5) is null
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
