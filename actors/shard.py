"""ShardCore: everything one shard does, as a plain class (the Ray actor wraps it at build time).

- owns all writes of its users through a per-user FIFO kept here (arrival order at the shard,
  not Ray's call order), and is the one writer of its keyword index and vector directory;
- reads run concurrently with writes (the actor is threaded);
- on start it reopens its stores and rebuilds the keyword index from the vector store when it
  is missing or stale (a dirty marker left by an interrupted write, or a count mismatch);
- auto memory: ``ingest`` archives session turns and queues extraction jobs run by worker
  threads in per-user order (:mod:`actors.extraction_queue`); ``job`` and ``recall`` read the
  shard's event archive (:class:`memcore.archive_ports.EventArchive`); jobs left unfinished by a dead shard
  are re-queued on start;
- a maintenance thread expires memories of apps with a TTL (:mod:`actors.maintenance`);
- bulk writes of the backfill job (``backfill``: archive + entries with precomputed vectors +
  session cursors, in the user's FIFO) and the generations of re-extraction
  (:mod:`actors.generations`): the service it serves from is swapped in one step while
  every write is held at the writes gate (:class:`actors.write_gate.WriteGate`).

The parts share one :class:`actors.context.ShardContext` (layout, served service, archive, the
writes gate's two doors); every path of the shard's directory comes from its
:class:`memcore.layout.ShardLayout`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import TypeAdapter

from actors.context import ShardContext
from actors.current import CurrentService
from actors.extraction_queue import ExtractionJobs
from actors.fencing import Fencing, fenced_calls
from actors.generations import Generations
from actors.maintenance import Maintenance
from actors.queues import Ticket, UserQueues
from actors.shard_backfill import write_backfill
from actors.shard_erasure import ErasingTools, ShardErasure
from actors.shard_graph import ShardGraph
from actors.shard_telemetry import shard_started, spanned, timed_write, traced_call
from actors.write_gate import WriteGate
from memcore import factory, preload, tools
from memcore.app_policy import ToolMode
from memcore.data_root import check_shard_count, hold_shared
from memcore.errors import NotFoundError, ValidationError
from memcore.extraction.events import parse_events
from memcore.fact_search import fact_line, facts_for_search
from memcore.fields import now_utc
from memcore.graph_backup import UserGraph, export_user, restore_user
from memcore.knowledge import fact_json
from memcore.layout import ShardLayout
from memcore.model import Entry, InjectionMode, Memory, PreloadResult, UserKey
from memcore.ports import Embedder, Extractor, Vectors
from memcore.records import JobRecord, RecallHit
from memcore.search_model import SearchHit, SearchOptions, TopicsMatch
from memcore.service import MemoryService
from memcore.settings import Settings
from memcore.validation import check_session, validate
from memcore.vocabulary import GRAPH_READ_TOOLS, LOAD, MAX_RECALL_RESULTS, SEARCH

__all__ = ["READS", "WRITES", "Ack", "ShardCore", "Ticket", "UserQueues"]
_HITS_JSON = TypeAdapter(list[SearchHit])

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class Ack:
    """A write's result plus its position in the user's FIFO (1, 2, 3, ... per user, kept across
    shard restarts and erasures by the archive's :class:`memcore.archive_ports.SequenceRepository`)."""

    seq: int
    value: Any


class ShardCore:
    def __init__(
        self,
        settings: Settings,
        shard: int,
        embedder: Embedder | None = None,
        *,
        extractor: Extractor | None = None,
        start_workers: bool = True,
    ) -> None:
        self.settings = settings = settings.on_this_node()  # a node-local data root, where the node names one
        self.shard = shard
        self._data_lock = hold_shared(settings)  # `memctl reshard` waits for every shard to be gone
        try:
            check_shard_count(settings)  # the data directory's N, or a reshard that has to finish first
        except BaseException:
            self._data_lock.close()
            raise
        self.layout = ShardLayout(settings, shard)
        self.started_at = time.time()
        generation = factory.current_generation(self.layout)
        self.archive = factory.build_archive(self.layout)
        try:
            self.current = CurrentService(factory.build_service(
                self.layout, embedder, generation=generation, last_read=self.archive.access.last_access))
        except BaseException:
            self.archive.close()
            self._data_lock.close()
            raise
        try:
            self.epoch = self.archive.lease.acquire()
        except BaseException:
            self.archive.close()
            self.service.vectors.close()
            self.service.keywords.close()
            self._data_lock.close()
            raise
        """This incarnation's lease epoch: a later incarnation of the shard fences this one (:mod:`actors.fencing`)."""
        self.fencing = Fencing(shard, self.archive.lease, self._stop_fenced)
        self._queues = UserQueues(self.archive.sequence.next)
        gate = WriteGate(self._queues, self.layout.dirty_marker, self.archive.lease.check)
        self.ctx = ctx = ShardContext(self.layout, self.current, self.archive, gate.writing, gate.frozen)
        """What every part of this shard shares: each part below takes this one object."""
        t0 = time.perf_counter()
        self.rebuilt = self._recover()
        self.jobs = ExtractionJobs(ctx, extractor=extractor, start=start_workers, on_fenced=self.fencing.fenced)
        self.generations = Generations(ctx, generation)
        self.erasure = ShardErasure(ctx, self.generations)
        self.graph = ShardGraph(ctx)
        self.maintenance = Maintenance(ctx, compact=self.erasure.compact_if_needed, start=start_workers)
        self.watch = shard_started(self, time.perf_counter() - t0)

    # ------------------------------------------------------------ lifecycle
    def _recover(self) -> int | None:
        """Finish rotating updates an interrupted write left half done, then rebuild the keyword index if
        the write left it stale; returns docs indexed or None."""
        dirty = self.layout.dirty_marker
        service = self.service
        if dirty.exists():
            finished = service.finish_rotations(self.layout.owns)
            if finished:
                log.warning("shard %d: finished %d interrupted rotating update(s)", self.shard, finished)
        if not dirty.exists() and not self.layout.stale(service.vectors, service.keywords):
            return None
        log.warning("shard %d: rebuilding keyword index (dirty=%s, staged=%s, keywords=%d)", self.shard,
                    dirty.exists(), service.keywords.needs_rebuild, service.keywords.count())
        count = self.layout.reindex(service.vectors, service.keywords)
        dirty.unlink(missing_ok=True)
        return count

    def _counts(self) -> dict[str, int]:
        with self.current.reading() as service:
            return {"entries": self.layout.owned_count(service.vectors), "keyword_docs": service.keywords.count()}

    def status(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "pid": os.getpid(),
            **self._counts(),
            "pending_writes": self._queues.pending(),
            "rebuilt_on_start": self.rebuilt,
            "started_at": self.started_at,
            "extraction": self.jobs.status(),
            "maintenance": self.maintenance.last,
            "generation": self.generations.current,
            "lease_epoch": self.epoch,
            "data_dir": str(self.settings.data_dir),
        }

    def _stop_fenced(self) -> None:
        """Stop the background work of a fenced incarnation (its stores stay open for reads it refuses)."""
        self.jobs.close(timeout=1.0)
        self.maintenance.close()

    def close(self) -> None:
        self.watch.close()
        self.maintenance.close()
        self.jobs.close()
        self.generations.close()
        self.archive.close()
        self.service.vectors.close()
        self.service.keywords.close()
        self._data_lock.close()

    # --------------------------------------------------------------- writes
    @property
    def service(self) -> MemoryService:
        """The service this shard serves from now (:class:`actors.current.CurrentService`)."""
        return self.current.get()

    def _write(self, key: UserKey, fn: Callable[[], T]) -> Ack:
        with self.ctx.writing(key) as seq:
            return Ack(seq=seq, value=fn())

    def _reads(self, key: UserKey) -> bool:
        return self.settings.policy(key.app).reads

    def _writable(self, key: UserKey) -> None:
        """Writes of an app whose memory is off are refused (deletes and erasure always work)."""
        self.settings.policy(key.app).check_writes()

    @timed_write("add")
    def add(self, key: UserKey, memory: dict[str, Any]) -> Ack:
        self._writable(key)
        return self._write(key, lambda: self.service.add(key, memory))

    @timed_write("add")
    def add_many(self, key: UserKey, memories: list[dict[str, Any]], vectors: Vectors | None = None) -> Ack:
        self._writable(key)
        return self._write(key, lambda: self.service.add_many(key, memories, vectors=vectors))

    def backfill(
        self, key: UserKey, sessions: list[tuple[str, list[dict[str, Any]]]], memories: list[dict[str, Any]],
        vectors: Vectors | None = None,
    ) -> Ack:
        """One bulk write of archived sessions, in the user's FIFO: archive their turns (idempotent), add
        their entries (``vectors`` precomputed, one row per memory), mark the turns extracted and move each
        session's cursor to its last event, so a later live ingest of the session only extracts what is new.

        Everything is validated before anything is written. Idempotent: an entry already stored with
        the same id (same content) and a superset of the provenance is left as it is — a re-run neither
        duplicates nor rewrites, and does not bring back an entry the user deleted since.
        """
        self._writable(key)
        parsed = [(check_session(s), parse_events(events)) for s, events in sessions]
        mems = [validate(Memory, m, prefix=f"memories.{i}.") for i, m in enumerate(memories)]
        if vectors is not None and len(vectors) != len(mems):
            raise ValidationError("one vector per memory is required", field="vectors")
        return self._write(key, lambda: write_backfill(self.service, self.archive, key, parsed, mems, vectors))

    @timed_write("update")
    def update(self, key: UserKey, entry_id: str, memory: dict[str, Any]) -> Ack:
        self._writable(key)
        return self._write(key, lambda: self.service.update(key, entry_id, memory))

    @timed_write("delete")
    def delete(self, key: UserKey, entry_id: str, hard: bool | None = None, purge_sources: bool = False) -> Ack:
        """Delete one entry and the archived turns only it came from (all of its turns with ``purge_sources``):
        hidden on a soft delete, removed on a hard one (:mod:`actors.shard_erasure`)."""
        return self._write(key, lambda: self.erasure.delete(key, entry_id, hard, purge_sources))

    @timed_write("clear")
    def clear(self, key: UserKey, hard: bool | None = None, purge_sources: bool = False) -> Ack:
        """Delete every entry of ``key`` and the archived turns they came from (every turn with
        ``purge_sources``); the value is the number of entries that were active."""
        return self._write(key, lambda: self.erasure.clear(key, hard, purge_sources)["entries"])

    @timed_write("forget")
    def drop_turns(self, key: UserKey, session: str, event_ids: list[str] | None = None) -> Ack:
        """Remove archived turns of ``session`` (``event_ids``, or all) and the entries made only from them
        (:meth:`actors.shard_erasure.ShardErasure.drop_turns`); the value counts what was removed."""
        session = check_session(session)
        return self._write(key, lambda: self.erasure.drop_turns(key, session, event_ids))

    @timed_write("forget")
    def forget(self, key: UserKey) -> Ack:
        """Erase ``key`` completely (entries, tombstones, archived turns, cursors, jobs, access times, every
        generation; the write counter keeps counting, so ``X-Memcluster-Seq`` never repeats); the value
        counts what was removed. Compaction then removes the bytes."""
        return self._write(key, lambda: self.erasure.forget(key))

    def compact(self) -> dict[str, Any]:
        """Rewrite this shard's stores and archive without deleted data (writes wait meanwhile)."""
        return self.erasure.compact()

    def tool(self, key: UserKey, name: str, arguments: dict[str, Any], mode: ToolMode | str | None = None) -> Any:
        """Run an agent's tool call under the app's policy: only the tools exposed in the app's mode run
        (others are 403, whatever ``mode`` the caller names; a ``mode`` other than the app's is 403)."""
        policy = self.settings.policy(key.app)
        policy.check_writes()  # memory off: no tool is exposed, every call is refused naming the app
        policy.check_mode(mode)
        exposed = policy.exposed_tools()
        budget = policy.default_budget(arguments.get("max_tokens"))
        if name == SEARCH and budget is not None:
            arguments = {**arguments, "max_tokens": budget}
        graph = self.graph.kg
        if name in (SEARCH, LOAD) or name in GRAPH_READ_TOOLS:
            with self.current.reading() as service:
                return tools.execute(service, key, name, arguments, enabled=exposed, graph=graph)
        backend = ErasingTools(self.service, self.erasure)
        return self._write(key, lambda: tools.execute(backend, key, name, arguments, enabled=exposed, graph=graph))

    # ------------------------------------------------------ knowledge graph
    def graph_add(self, key: UserKey, fact: dict[str, Any], supersede: bool = False) -> Ack:
        """Add a fact (idempotent), or with ``supersede`` make it the one current object of its subject's
        predicate (:mod:`actors.shard_graph`)."""
        return self._write(key, lambda: self.graph.add(key, fact, supersede))

    def graph_invalidate(self, key: UserKey, ref: dict[str, Any]) -> Ack:
        return self._write(key, lambda: self.graph.invalidate(key, ref))

    def graph_entity_put(self, key: UserKey, entity: dict[str, Any]) -> Ack:
        return self._write(key, lambda: self.graph.declare(key, entity))

    def graph_delete(self, key: UserKey, fact_id: str) -> Ack:
        return self._write(key, lambda: self.graph.delete(key, fact_id))

    def diary_write(self, key: UserKey, entry: dict[str, Any]) -> Ack:
        return self._write(key, lambda: self.graph.write_diary(key, entry))

    def graph_query(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return self.graph.query(key, query)

    def graph_timeline(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return self.graph.timeline(key, query)

    def graph_neighbourhood(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return self.graph.neighbourhood(key, query)

    def graph_entity(self, key: UserKey, name: str) -> dict[str, Any] | None:
        return self.graph.entity(key, name)

    def diary_read(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return self.graph.read_diary(key, query)

    def graph_export_users(self, app: str) -> list[str]:
        """The users of ``app`` this shard owns that have a graph or a diary, sorted (none when the app's memory
        is off: an export is a read)."""
        if not self.settings.policy(app).reads:
            return []
        return [u for u in self.archive.graph.users(app) if self.layout.owns(UserKey(app=app, user=u))]

    def graph_export(self, key: UserKey) -> UserGraph:
        """Everything of ``key``'s graph and diary (:mod:`memcore.graph_backup`; empty when the app's memory is
        off)."""
        if not self._reads(key):
            return UserGraph()
        return export_user(self.graph.kg.graph, self.graph.kg.diary, key)  # what the TTL expired left out

    def graph_restore(self, key: UserKey, data: UserGraph) -> Ack:
        """Write a backed-up graph of ``key`` as it is, in the user's FIFO (refused when the app's memory is off)."""
        self._writable(key)
        return self._write(key, lambda: restore_user(self.archive.graph, self.archive.diary, key, data))

    # --------------------------------------------------------------- backups
    @timed_write("restore")
    def restore(self, key: UserKey, entries: list[Any]) -> Ack:
        """Write backed-up entries of ``key`` as they are (:meth:`MemoryService.restore`), in the user's FIFO
        (refused when the app's memory is off)."""
        self._writable(key)
        for i, e in enumerate(entries):
            app, user = (e.app, e.user) if isinstance(e, Entry) else (e.get("app"), e.get("user"))
            if (app, user) != (key.app, key.user):
                raise ValidationError(f"entry {i} belongs to another app or user", field=f"entries.{i}.user")
        return self._write(key, lambda: self.service.restore(entries))

    def export_users(self, app: str) -> list[str]:
        """The users of ``app`` this shard owns (with at least one entry, tombstones count), sorted (none when
        the app's memory is off: an export is a read)."""
        if not self.settings.policy(app).reads:
            return []
        with self.current.reading() as service:
            return [u for u in service.users(app) if self.layout.owns(UserKey(app=app, user=u))]

    def export(self, key: UserKey) -> list[Entry]:
        """Every entry of ``key``, tombstones included, ordered by id (a backup, Mem0's history; no TTL refresh;
        none when the app's memory is off)."""
        if not self._reads(key):
            return []
        with self.current.reading() as service:
            return service.export(key.app, user=key.user)

    # ----------------------------------------------------------- auto memory
    @spanned("memcluster.ingest")
    def ingest(self, key: UserKey, session: str, events: list[dict[str, Any]]) -> JobRecord:
        """Archive a session's events and record its extraction job (see :mod:`actors.extraction_queue`)."""
        return self.jobs.ingest(key, session, events)

    def job(self, job_id: str) -> JobRecord:
        return self.jobs.job(job_id)

    def recall(self, key: UserKey, query: str, session: str | None = None, max_results: int = 10) -> list[RecallHit]:
        """Archived turns of ``key``'s sessions other than ``session``, best BM25 match first."""
        if not 1 <= max_results <= MAX_RECALL_RESULTS:
            raise ValidationError(f"max_results must be 1..{MAX_RECALL_RESULTS}", field="max_results")
        if not self._reads(key):
            return []
        since = self.service.expiry.alive_since(key.app, now_utc())  # older turns have expired
        return self.archive.events.search(key, query, exclude_session=session, limit=max_results, since=since)

    # ---------------------------------------------------------------- reads
    def get(self, key: UserKey, entry_id: str) -> Entry:
        if not self._reads(key):
            raise NotFoundError(f"memory {entry_id!r} not found (memory is off for app {key.app!r})",
                                field="memory_id")
        with self.current.reading() as service:
            entry = service.get(key, entry_id)
        self.maintenance.touch(key, [entry])
        return entry

    def read(
        self, key: UserKey, limit: int | None = None, metadata_filter: dict[str, Any] | None = None
    ) -> list[Entry]:
        if not self._reads(key):
            return []
        with self.current.reading() as service:
            entries = service.read(key, limit, metadata_filter)
        self.maintenance.touch(key, entries)
        return entries

    @spanned("memcluster.shard.search")
    def search(
        self, key: UserKey, options: SearchOptions | dict[str, Any], query_vector: Vectors | None = None
    ) -> list[SearchHit]:
        policy = self.settings.policy(key.app)
        opts = validate(SearchOptions, options)
        if not policy.reads:
            return []
        if (budget := policy.default_budget(opts.max_tokens)) != opts.max_tokens:
            opts = opts.model_copy(update={"max_tokens": budget})
        with self.current.reading() as service:
            hits = service.search(key, opts, query_vector=query_vector)
        self.maintenance.touch(key, [h.entry for h in hits])
        return hits

    def search_json(
        self, key: UserKey, options: SearchOptions | dict[str, Any], query_vector: Vectors | None = None
    ) -> bytes:
        """:meth:`search` with the hits as one JSON array (UTF-8), as the HTTP API sends them: bytes cross
        a Ray hop for less than model objects, and the ingress does not encode them again."""
        return _HITS_JSON.dump_json(self.search(key, options, query_vector), by_alias=True)

    def search_facts(self, key: UserKey, query: str, max_tokens: int | None = None) -> dict[str, Any]:
        """A search's ``include_facts`` part: the current facts of the entities ``query`` names within half of
        the budget (``max_tokens``, else the app's), and the budget left for the hits (``max_tokens``)."""
        policy = self.settings.policy(key.app)
        if not policy.reads:
            return {"facts": [], "max_tokens": max_tokens}
        facts, left = facts_for_search(self.graph.kg, key, query, policy.default_budget(max_tokens),
                                       self.service.token_count)
        now = self.graph.kg.now()
        return {"facts": [{**fact_json(f, now), "text": fact_line(f)} for f in facts], "max_tokens": left}

    def preload(
        self, key: UserKey, budget: int, message: str, mode: InjectionMode, playbook: str | None,
        topics: list[str] | None = None, topics_match: TopicsMatch = "any", max_tokens: int | None = None,
        min_relevance: float | None = None, include_facts: bool = False,
    ) -> PreloadResult:
        """The preload block (:mod:`memcore.preload`); with ``include_facts`` the current facts of the entities
        the message names follow the memories (their tokens taken from the budget first, at most half)."""
        policy = self.settings.policy(key.app)
        limit = policy.default_budget(max_tokens)
        facts: list[str] = []
        if include_facts and policy.reads:
            found, limit = facts_for_search(self.graph.kg, key, message, limit, self.service.token_count)
            facts = [fact_line(f) for f in found]
        with self.current.reading() as service:
            result = preload.preload(service, key, budget if policy.reads else 0, message, mode=mode,
                                     playbook=playbook, topics=topics, topics_match=topics_match,
                                     max_tokens=limit, count=service.token_count, min_relevance=min_relevance)
        self.maintenance.touch(key, result.entries)
        if facts:
            result = result.model_copy(update={"text": preload.with_facts(result.text, facts)})
        return result

    def traced(self, carrier: dict[str, str] | None, method: str, *args: Any) -> Any:
        return traced_call(self, carrier, method, *args)  # a call under the caller's trace (tracing on)

    def ping(self) -> int:
        return self.shard

    def embedder_info(self) -> dict[str, Any]:
        """The name and dimension of the embedder this shard's queries use (jobs check theirs against it)."""
        return {"name": self.service.embedder.name, "dim": self.service.embedder.dim}

    # ---------------------------------------------------------- generations
    def generation_info(self) -> dict[str, Any]:
        return self.generations.info()

    def begin_generation(self, generation: int, apps: list[str], users: list[str]) -> dict[str, Any]:
        return self.generations.begin(generation, apps, users)

    def reextract_user(self, generation: int, key: UserKey, extractor: dict[str, Any]) -> dict[str, Any]:
        return self.generations.reextract_user(generation, key, extractor)

    def switch_generation(self, generation: int) -> dict[str, Any]:
        return self.generations.switch(generation)

    def abort_generation(self, generation: int) -> dict[str, Any]:
        return self.generations.abort(generation)

    def drop_generation(self, generation: int) -> dict[str, Any]:
        return self.generations.drop(generation)


#: The shard's remote calls, split once (a test checks the split against :class:`ShardCore`):
#: a read may be retried on a restarting actor; a write never is (an update is not idempotent).
READS = frozenset({"status", "get", "read", "search", "search_json", "preload", "ping", "job", "recall",
                   "embedder_info", "generation_info", "export", "export_users",
                   "graph_query", "graph_timeline", "graph_neighbourhood", "graph_entity", "diary_read",
                   "graph_export", "graph_export_users", "search_facts"})
WRITES = frozenset({"add", "add_many", "backfill", "update", "delete", "clear", "forget", "compact", "tool",
                    "restore", "ingest", "drop_turns",
                    "graph_add", "graph_invalidate", "graph_entity_put", "graph_delete", "diary_write", "graph_restore",
                    "begin_generation", "reextract_user", "switch_generation", "abort_generation",
                    "drop_generation"})
LOCAL = frozenset({"close", "traced"})
"""Methods of the object itself, never called by name through a backend (``traced`` is the Ray
backend's envelope around another method when tracing is on)."""

UNGATED_WRITES = frozenset({"compact", "begin_generation", "switch_generation", "abort_generation",
                            "drop_generation"})
"""Writes that do not (only) pass the writes gate: they check the shard lease first (:mod:`actors.fencing`)."""
fenced_calls(ShardCore, READS | WRITES, UNGATED_WRITES)  # a fenced incarnation refuses every call
