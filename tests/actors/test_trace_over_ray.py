"""Trace context over a real Ray actor call: the driver traces with the SDK's in-memory exporter and
calls a shard actor through RayShardBackend; the actor (its environment names an OTLP endpoint) exports
over OTLP/HTTP to a collector served here on 127.0.0.1. Its ``upsert_memory`` and ``memcluster.shard.search``
spans are children of the driver's span, in the driver's trace, and the search's embed, vector and keyword
spans are children of ``memcluster.shard.search``."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from memcore import tracing
from memcore.model import UserKey

pytestmark = pytest.mark.ray


@pytest.fixture
def collector() -> Iterator[tuple[str, list[Any]]]:
    spans: list[Any] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            req = ExportTraceServiceRequest.FromString(body)
            spans.extend(s for rs in req.resource_spans for ss in rs.scope_spans for s in ss.spans)
            out = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", spans
    server.shutdown()


def test_the_shard_actor_continues_the_callers_trace(ray_session: Any, collector: tuple[str, list[Any]],
                                                     tmp_path: Path) -> None:
    import ray

    from actors.router import RayShardBackend
    from actors.shard import ShardCore
    from memcore.settings import Settings

    url, received = collector
    settings = Settings(data_dir=tmp_path, shards=1, embedder={"kind": "hashing", "dim": 64},
                        namespace="memcluster-trace-test")
    actor = ray.remote(ShardCore).options(  # type: ignore[attr-defined]
        num_cpus=0, max_concurrency=4,
        runtime_env={"env_vars": {"MEMCLUSTER_OTLP_ENDPOINT": url, "OTEL_BSP_SCHEDULE_DELAY": "200"}},
    ).remote(settings, 0)
    backend = RayShardBackend(settings)
    backend._actors[0] = actor  # the actor above, with the collector in its environment
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    key = UserKey(app="trace", user="ray-user-77")
    try:
        with tracing.span("driver.request"):
            asyncio.run(backend.call(key, "add", {"text": "The user plays the oboe."}))
            asyncio.run(backend.call(key, "search_json", {"query": "oboe"}))
    finally:
        tracing.disable()
    (root,) = exporter.get_finished_spans()
    inner = {"memcluster.embed", "memcluster.vector_search", "memcluster.keyword_search"}
    wanted = {"upsert_memory", "memcluster.shard.search"} | inner
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and wanted - {s.name for s in received}:
        time.sleep(0.2)
    ray.kill(actor)
    by_name = {s.name: s for s in received}
    assert wanted <= set(by_name), [s.name for s in received]
    for name in wanted:
        span = by_name[name]
        assert int.from_bytes(span.trace_id, "big") == root.context.trace_id, name
        assert all(key.user not in str(a.value) and "oboe" not in str(a.value) for a in span.attributes), name
    for name in ("upsert_memory", "memcluster.shard.search"):  # the actor's spans hang off the caller's
        assert int.from_bytes(by_name[name].parent_span_id, "big") == root.context.span_id, name
    for name in inner:  # the search's parts (the shard embeds: no vector came with the call)
        assert by_name[name].parent_span_id == by_name["memcluster.shard.search"].span_id, name
