"""Optional OpenTelemetry traces: off unless an OTLP endpoint is configured, and then free of cost
when off (:func:`span` hands back one shared null context; opentelemetry is not even imported).

Turn on with ``MEMCLUSTER_OTLP_ENDPOINT`` (or the standard ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` /
``OTEL_EXPORTER_OTLP_ENDPOINT``) in every process (Serve replicas and shard actors inherit the
runtime environment), or call :func:`configure` with a tracer provider (the tests use the SDK's
in-memory exporter). Span names follow the GenAI memory names where they fit (``search_memory``,
``upsert_memory``, ``delete_memory``) with ``gen_ai.operation.name``; the others are
``memcluster.*``. Spans carry the app and the shard, never the user id or any text.

An HTTP search is ``search_memory`` with ``memcluster.embed`` (``gen_ai.operation.name =
embeddings``; in the ingress when it embeds queries, else inside the shard's span),
``memcluster.shard_call`` (the ingress side of the shard hop) and ``memcluster.shard.search`` (the
shard side, in the same trace across the Ray actor), under which each pass has
``memcluster.vector_search`` / ``memcluster.keyword_search`` (``db.system.name``,
``db.operation.name``, the candidate pool, how many came back) and ``memcluster.fetch_entries`` (the
keyword-only hits' entries read from the vector store). Never the query text.

Context crosses threads through :func:`capture` / :func:`attached` and processes (the Ray actor
call) through :func:`carrier` (W3C ``traceparent``) and :func:`attached`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

ENDPOINT_VARS = ("MEMCLUSTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
GENAI = frozenset({"search_memory", "upsert_memory", "delete_memory"})
WRITE_SPANS = {"add": "upsert_memory", "update": "upsert_memory", "restore": "upsert_memory",
               "delete": "delete_memory", "clear": "delete_memory", "forget": "delete_memory"}
_NULL: AbstractContextManager[None] = nullcontext()


class _State:
    tracer: Any = None
    checked = False


def endpoint() -> str | None:
    return next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)


def configure(provider: Any = None, *, service_name: str = "memcluster") -> bool:
    """Trace through ``provider``, or (None) through an OTLP/HTTP exporter when an endpoint is set."""
    _State.checked = True
    if provider is None:
        url = endpoint()
        if url is None:
            _State.tracer = None
            return False
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        if not url.rstrip("/").endswith("/v1/traces") and not os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
            url = url.rstrip("/") + "/v1/traces"
        provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=url)))
    _State.tracer = provider.get_tracer("memcluster")
    return True


def disable() -> None:
    _State.tracer, _State.checked = None, True


def enabled() -> bool:
    if not _State.checked:
        configure()
    return _State.tracer is not None


def span(name: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A span named ``name`` under the current one (a shared null context when tracing is off)."""
    if not enabled():
        return _NULL
    attrs = {k.replace("__", "."): v for k, v in attributes.items() if v is not None}
    if name in GENAI:
        attrs["gen_ai.operation.name"] = name
    return _State.tracer.start_as_current_span(name, attributes=attrs)  # type: ignore[no-any-return]


def search_span(app: str, max_results: int, hybrid: bool) -> AbstractContextManager[Any]:
    """The ``search_memory`` span of one search request (no query text, no user)."""
    if not enabled():
        return _NULL
    return span("search_memory", memcluster__app=app, gen_ai__retrieval__top_k=max_results,
                memcluster__hybrid=hybrid)


def embed_span(embedder: Any) -> AbstractContextManager[Any]:
    """A query-embedding span (GenAI ``embeddings``: the model name and the dimension)."""
    if not enabled():
        return _NULL
    return span("memcluster.embed", gen_ai__operation__name="embeddings", gen_ai__request__model=embedder.name,
                gen_ai__embeddings__dimension__count=embedder.dim)


def store_span(name: str, system: str, operation: str, **attributes: Any) -> AbstractContextManager[Any]:
    """A store call inside a search (``db.system.name``, ``db.operation.name`` and ``attributes``)."""
    if not enabled():
        return _NULL
    return span(name, db__system__name=system, db__operation__name=operation, **attributes)


def carrier() -> dict[str, str] | None:
    """The current context as W3C headers (None when tracing is off or no span is current)."""
    if not enabled():
        return None
    from opentelemetry.propagate import inject

    headers: dict[str, str] = {}
    inject(headers)
    return headers or None


def capture() -> Any:
    """The current context, to attach in another thread (None when tracing is off)."""
    if not enabled():
        return None
    from opentelemetry import context

    return context.get_current()


@contextmanager
def attached(ctx: Any) -> Iterator[None]:
    """Run under ``ctx``: a :func:`capture` result or a :func:`carrier` dict (None: nothing to attach)."""
    if ctx is None or not enabled():
        yield
        return
    from opentelemetry import context
    from opentelemetry.propagate import extract

    # a captured Context is a dict too: only a plain dict is a carrier of W3C headers
    token = context.attach(ctx if isinstance(ctx, context.Context) else extract(ctx))
    try:
        yield
    finally:
        context.detach(token)
