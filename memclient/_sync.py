"""The synchronous client. Request building and response parsing live in :mod:`memclient._protocol`."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

import httpx

from memclient import _protocol as P
from memclient._protocol import DEFAULT_BASE_URL, TimeLike
from memclient.retry import Retry
from memclient.types import Entry, Job, PreloadResult, SearchResults

T = TypeVar("T")


class MemoryClient:
    """Blocking client for the memcluster HTTP API.

    ``transport`` replaces httpx's network transport (e.g. ``httpx.MockTransport`` in tests).
    ``retry``: how idempotent calls are tried again on no answer or a 5xx (:mod:`memclient.retry`;
    ``Retry.never()`` sends every call once). Every method raises a :class:`memclient.MemclientError`
    subclass on an error answer.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        api_key: str | None = None,
        timeout: float = 10.0,
        transport: httpx.BaseTransport | None = None,
        retry: Retry | None = None,
    ) -> None:
        self.retry = retry if retry is not None else Retry()
        self._http = httpx.Client(base_url=base_url, headers=P.headers(api_key), timeout=timeout, transport=transport)

    def __enter__(self) -> MemoryClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _send(self, call: P.Call[T]) -> T:
        tried = 0
        while True:
            tried += 1
            try:
                response = self._http.request(call.method, call.path, params=call.params, json=call.body)
            except httpx.TransportError as exc:
                wait = P.next_wait(self.retry, call, tried, None)
                if wait is None:
                    raise P.transport_error(call, exc) from exc
            else:
                wait = P.next_wait(self.retry, call, tried, response)
                if wait is None:
                    return P.finish(call, response, retried=tried > 1)
            time.sleep(wait)

    # ------------------------------------------------------------------ memories
    def add(
        self, app: str, user: str, text: str, *, topics: Sequence[str] | None = None, kind: str = "fact",
        event_time: TimeLike | None = None, participants: Sequence[str] | None = None,
        location: str | None = None, source: str | None = None, provenance: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None, key: str | None = None,
        ttl_s: float | None = None,
    ) -> Entry:
        """Add a memory (idempotent for the same content; with ``key``, the same key replaces the memory
        stored under it; with ``ttl_s``, the memory expires that many seconds after this write:
        no read returns it afterwards); returns the stored entry with its id."""
        body = P.memory_body(text, topics=topics, kind=kind, event_time=event_time, participants=participants,
                             location=location, source=source, provenance=provenance, metadata=metadata,
                             key=key, ttl_s=ttl_s)
        return self._send(P.add(app, user, body))

    def get(self, app: str, user: str, memory_id: str) -> Entry:
        """One active entry; :class:`NotFound` for an unknown or deleted id."""
        return self._send(P.get(app, user, memory_id))

    def read(
        self, app: str, user: str, limit: int | None = None, *,
        metadata_filter: Mapping[str, str | int | bool] | None = None,
    ) -> list[Entry]:
        """The user's active entries, newest first (the server's default count when ``limit`` is None);
        with ``metadata_filter`` only those whose metadata has every ``key: value``."""
        return self._send(P.read(app, user, limit, metadata_filter))

    def update(
        self, app: str, user: str, memory_id: str, text: str, *, topics: Sequence[str] | None = None,
        kind: str = "fact", event_time: TimeLike | None = None, participants: Sequence[str] | None = None,
        location: str | None = None, source: str | None = None, provenance: Sequence[str] | None = None,
        metadata: Mapping[str, Any] | None = None, key: str | None = None,
        ttl_s: float | None = None, expires_at: TimeLike | None = None, no_expiry: bool = False,
    ) -> Entry:
        """Replace a memory's content; the returned entry carries the effective (possibly rotated) id. The
        expiry is kept unless one is named: ``ttl_s`` restarts the lifetime (expires that many seconds after
        this update), ``expires_at`` sets the time, ``no_expiry=True`` removes it (the id is kept)."""
        body = P.memory_body(text, topics=topics, kind=kind, event_time=event_time, participants=participants,
                             location=location, source=source, provenance=provenance, metadata=metadata,
                             key=key)
        body.update(P.expiry_body(ttl_s, expires_at, no_expiry))
        return self._send(P.update(app, user, memory_id, body))

    def delete(self, app: str, user: str, memory_id: str, hard: bool | None = None,
               purge_sources: bool = False) -> None:
        """Delete one memory (soft by default on the server; ``hard=True`` removes it). The archived turns
        only it came from are hidden (soft) or removed (hard); ``purge_sources=True``: all of its turns."""
        self._send(P.delete(app, user, memory_id, hard, purge_sources))

    def clear(self, app: str, user: str, hard: bool | None = None, purge_sources: bool = False) -> None:
        """Delete every memory of the user and the archived turns they came from (``purge_sources=True``:
        every archived turn of the user)."""
        self._send(P.clear(app, user, hard, purge_sources))

    def forget(self, app: str, user: str) -> dict[str, Any]:
        """Erase the user completely (entries, archived turns, cursors, jobs); returns the counts removed."""
        return self._send(P.forget(app, user))

    def delete_session(self, app: str, user: str, session: str) -> dict[str, Any]:
        """Remove every archived turn of ``session`` for good, and the memories made only from them; returns
        ``{"session", "events", "entries"}`` (the counts removed; a second call removes nothing)."""
        return self._send(P.delete_session(app, user, session))

    def delete_turn(self, app: str, user: str, session: str, event_id: str) -> dict[str, Any]:
        """Remove one archived turn of ``session`` (and the memories made only from it); :class:`NotFound`
        when the session holds no such turn."""
        return self._send(P.delete_turn(app, user, session, event_id))

    def compact(self) -> dict[str, Any]:
        """Compact every shard's stores so that deleted text leaves the data files (per-shard results)."""
        return self._send(P.compact())

    def search(
        self, app: str, user: str, query: str, *, kind: str | None = None, time_from: TimeLike | None = None,
        time_to: TimeLike | None = None, max_results: int | None = None, max_tokens: int | None = None,
        similarity_threshold: float | None = None,
        order_by_event_time: bool | None = None, deduplicate: bool | None = None, kind_fallback: bool | None = None,
        hybrid: bool | None = None, rrf_k: int | None = None, dense_weight: float | None = None,
        keyword_weight: float | None = None, keyword_query: str | None = None, date_boost: bool | None = None,
        merge_overlapping: bool | None = None, metadata_filter: Mapping[str, str | int | bool] | None = None,
        topics: Sequence[str] | None = None, topics_match: str | None = None, include_facts: bool | None = None,
    ) -> SearchResults:
        """Ranked hits; options left as None take the server's defaults (README, "Retrieval"). With
        ``include_facts`` the result's ``facts`` holds the current knowledge-graph facts the query names."""
        options = {"kind": kind, "time_from": time_from, "time_to": time_to, "max_results": max_results,
                   "max_tokens": max_tokens,
                   "similarity_threshold": similarity_threshold, "order_by_event_time": order_by_event_time,
                   "deduplicate": deduplicate, "kind_fallback": kind_fallback, "hybrid": hybrid, "rrf_k": rrf_k,
                   "dense_weight": dense_weight, "keyword_weight": keyword_weight, "keyword_query": keyword_query,
                   "date_boost": date_boost, "merge_overlapping": merge_overlapping,
                   "metadata_filter": dict(metadata_filter) if metadata_filter else None,
                   "topics": list(topics) if topics is not None else None, "topics_match": topics_match,
                   "include_facts": include_facts}
        return self._send(P.search(app, user, P.search_body(query, options)))

    def preload(
        self, app: str, user: str, budget: int = 10, message: str = "", mode: str = "system",
        playbook: str | None = None, *, topics: Sequence[str] | None = None, topics_match: str | None = None,
        max_tokens: int | None = None, min_relevance: float | None = None, include_facts: bool = False,
    ) -> PreloadResult:
        """The memories to inject before a model call (budget 0 off, -1 all) and their rendered block;
        ``topics`` (any of them, or all with ``topics_match="all"``) narrows what is considered;
        ``min_relevance`` (the hits' ``relevance``, -1..1) injects only memories that match the message;
        ``include_facts`` adds the current knowledge-graph facts of the entities the message names."""
        return self._send(P.preload(app, user, budget, message, mode, playbook, topics, topics_match,
                                        max_tokens, min_relevance, include_facts))

    # ------------------------------------------------------------------ tools
    def tools(self, app: str, mode: str | None = None) -> list[dict[str, Any]]:
        """The memory tools the app exposes to agents (in the mode its deployment set), as OpenAI
        function-calling schemas; naming another ``mode`` is an :class:`AuthError` (403)."""
        return self._send(P.tools(app, mode))

    def call_tool(
        self, app: str, user: str, name: str, arguments: Mapping[str, Any], mode: str | None = None
    ) -> dict[str, Any]:
        """Execute one tool call; returns the tool's JSON result (:class:`AuthError` if the app does not
        expose the tool to agents)."""
        return self._send(P.call_tool(app, user, name, arguments, mode))

    # ------------------------------------------------------------------ auto memory
    def ingest(
        self, app: str, user: str, session: str, messages: Sequence[Mapping[str, Any]], *,
        wait: float | None = None, **extra: Any,
    ) -> Job:
        """Send a session's messages for background extraction; returns the job (poll :meth:`job`).

        Requires a server with auto memory. ``messages`` are chat messages as the agent holds them:
        ``{"role", "content"}`` (content a string or OpenAI content parts), optionally ``tool_calls``,
        ``tool_call_id``, ``name``, ``id``, ``timestamp`` (a datetime or ISO string) and
        ``external_context``. Resending the whole session each turn is fine, and so is sending only
        the new messages: the server extracts what it has not extracted yet. ``wait`` (seconds, at
        most 60) lets the server answer once the job finished.
        """
        return self._send(P.ingest(app, user, session, messages, wait, extra))

    def job(self, job_id: str) -> Job:
        """Status of an ingest job (queued / running / done / failed). Requires a server with auto memory."""
        return self._send(P.job(job_id))

    def wait_job(self, job_id: str, timeout: float) -> Job:
        """Poll :meth:`job` until the job is finished or ``timeout`` seconds passed; returns its last state
        (``finished`` is False when the time ran out)."""
        state = self.job(job_id)
        deadline = time.monotonic() + timeout
        while not state.finished and time.monotonic() < deadline:
            time.sleep(P.JOB_POLL_S)
            state = self.job(job_id)
        return state

    def recall(self, app: str, user: str, query: str, **options: Any) -> dict[str, Any]:
        """Search archived raw turns of the user's other sessions; returns the server's JSON
        ``{"hits": [{"session", "event_id", "role", "content", "timestamp", "score"}]}``.

        Options: ``session`` (the current one, left out), ``max_results`` (1..100, default 10).
        """
        return self._send(P.recall(app, user, P.search_body(query, options)))

    # ------------------------------------------------------------------ knowledge graph, diary
    def add_fact(self, app: str, user: str, subject: str, predicate: str, object: str, *,
                       supersede: bool = False, **fields: Any) -> dict[str, Any]:
        """Record ``subject -> predicate -> object`` (idempotent); ``supersede`` makes it the one current object
        of the subject's predicate. Fields: ``valid_from``, ``valid_to`` (dates or datetimes), ``confidence``,
        ``memories`` (memory ids), ``turns`` (turn refs), ``source``, ``subject_type``, ``object_type``.
        Returns ``{"fact", "created", "closed"}``."""
        body = {"subject": subject, "predicate": predicate, "object": object, "supersede": supersede or None,
                **fields}
        return self._send(P.graph_post(app, user, ("graph", "facts"), body))

    def invalidate_fact(self, app: str, user: str, subject: str, predicate: str, object: str,
                              ended: P.TimeLike | None = None) -> dict[str, Any]:
        """End a current fact at ``ended`` (default now), keeping its history; returns ``{"closed": [...]}``."""
        body = {"subject": subject, "predicate": predicate, "object": object, "ended": ended}
        return self._send(P.graph_post(app, user, ("graph", "facts", "invalidate"), body))

    def delete_fact(self, app: str, user: str, fact_id: str) -> dict[str, Any]:
        """Remove a fact for good (every version)."""
        return self._send(P.graph_delete(app, user, fact_id))

    def facts(self, app: str, user: str, entity: str | None = None, **options: Any) -> dict[str, Any]:
        """Facts of an entity (or all): options ``direction``, ``predicate``, ``as_of`` (valid time),
        ``known_at`` (record time), ``limit``. An unknown entity answers ``{"facts": []}``."""
        return self._send(P.graph_get(app, user, ("graph", "facts"), {"entity": entity, **options}))

    def timeline(self, app: str, user: str, entity: str | None = None, **options: Any) -> dict[str, Any]:
        """Facts in chronological order (options ``known_at``, ``limit``)."""
        return self._send(P.graph_get(app, user, ("graph", "timeline"), {"entity": entity, **options}))

    def neighbourhood(self, app: str, user: str, entity: str, hops: int = 1, **options: Any) -> dict[str, Any]:
        """Entities within ``hops`` of ``entity`` and the facts between them (options ``as_of``, ``known_at``,
        ``limit``)."""
        params = {"entity": entity, "hops": hops, **options}
        return self._send(P.graph_get(app, user, ("graph", "neighbourhood"), params))

    def put_entity(self, app: str, user: str, name: str, *, type: str | None = None,
                         aliases: Sequence[str] = ()) -> dict[str, Any]:
        """Declare an entity's type and aliases (the aliases replace the stored ones)."""
        return self._send(P.graph_put_entity(app, user, {"name": name, "type": type, "aliases": list(aliases)}))

    def entity(self, app: str, user: str, name: str) -> dict[str, Any] | None:
        """The entity a name or alias names, or None."""
        data = self._send(P.graph_get(app, user, ("graph", "entities", P.ident(name, "name")), {}))
        return data.get("entity")

    def write_diary(self, app: str, user: str, text: str, *, agent: str | None = None,
                          topic: str | None = None, wing: str | None = None) -> dict[str, Any]:
        """Write an agent diary entry (never part of memory search)."""
        body = {"text": text, "agent": agent, "topic": topic, "wing": wing}
        return self._send(P.graph_post(app, user, ("diary",), body))

    def read_diary(self, app: str, user: str, *, agent: str | None = None, **options: Any) -> dict[str, Any]:
        """An agent's entries, newest first: options ``limit``, ``since``, ``until``, ``wing``; returns
        ``{"agent", "entries", "total", "showing"}``."""
        return self._send(P.graph_get(app, user, ("diary",), {"agent": agent, **options}))

    # ------------------------------------------------------------------ health
    def healthz(self) -> dict[str, Any]:
        return self._send(P.healthz())

    def readyz(self) -> dict[str, Any]:
        """Shard status; :class:`Unavailable` while shards are unreachable."""
        return self._send(P.readyz())
