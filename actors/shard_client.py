"""Typed calls to the shards over a :class:`actors.backend.ShardBackend`: methods, not name strings.

Each method names the :class:`actors.shard.ShardCore` method it runs (the backend carries the
name to a Ray actor or a local object); writes return ``(value, FIFO sequence)``, reads the
value. Whether a call is a read or a write is :data:`actors.shard.READS` / ``WRITES``'s to say
(a test checks these clients and that split against ``ShardCore``).

:class:`ShardClient` is awaited (the HTTP ingress, the Mem0 API, MCP); :class:`SyncShardClient`
blocks (the Ray Data jobs: :mod:`jobs.backfill`, :mod:`jobs.reextract`). Both go through a backend,
so every caller gets its read retries and trace propagation (:mod:`actors.router`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from actors.backend import ShardBackend, SyncShardBackend, unwrap
from actors.extraction_queue import job_shard
from memcore import records
from memcore.app_policy import ToolMode
from memcore.errors import NotFoundError
from memcore.graph_backup import UserGraph
from memcore.ids import shard_of
from memcore.model import Entry, InjectionMode, PreloadResult, UserKey
from memcore.ports import Vectors
from memcore.records import JobRecord, RecallHit
from memcore.search_model import SearchHit, SearchOptions, TopicsMatch

T = TypeVar("T")
Written = tuple[T, int | None]


class ShardClient:
    """The shard calls of the HTTP ingress, the Mem0 API and MCP, one typed method each (and
    :meth:`wait_job`, which polls :meth:`job`)."""

    def __init__(self, backend: ShardBackend) -> None:
        self.backend = backend

    async def _write(self, key: UserKey, method: str, *args: Any) -> tuple[Any, int | None]:
        return unwrap(await self.backend.call(key, method, *args))

    # ---------------------------------------------------------------- writes
    async def add(self, key: UserKey, memory: dict[str, Any]) -> Written[Entry]:
        return await self._write(key, "add", memory)

    async def add_many(self, key: UserKey, memories: list[dict[str, Any]],
                       vectors: Vectors | None = None) -> Written[list[Entry]]:
        return await self._write(key, "add_many", memories, vectors)

    async def update(self, key: UserKey, entry_id: str, memory: dict[str, Any]) -> Written[Entry]:
        return await self._write(key, "update", entry_id, memory)

    async def delete(self, key: UserKey, entry_id: str, hard: bool | None = None,
                     purge_sources: bool = False) -> Written[dict[str, int]]:
        return await self._write(key, "delete", entry_id, hard, purge_sources)

    async def clear(self, key: UserKey, hard: bool | None = None, purge_sources: bool = False) -> Written[int]:
        return await self._write(key, "clear", hard, purge_sources)

    async def forget(self, key: UserKey) -> Written[dict[str, Any]]:
        return await self._write(key, "forget")

    async def drop_turns(self, key: UserKey, session: str,
                         event_ids: list[str] | None = None) -> Written[dict[str, Any]]:
        return await self._write(key, "drop_turns", session, event_ids)

    async def compact(self, shard: int) -> dict[str, Any]:
        return await self.backend.call_shard(shard, "compact")

    async def tool(self, key: UserKey, name: str, arguments: dict[str, Any],
                   mode: ToolMode | None = None) -> Written[Any]:
        return await self._write(key, "tool", name, arguments, mode)

    async def restore(self, key: UserKey, entries: list[Entry]) -> Written[int]:
        return await self._write(key, "restore", entries)

    async def ingest(self, key: UserKey, session: str, events: list[dict[str, Any]]) -> JobRecord:
        job, _ = await self._write(key, "ingest", session, events)
        return job

    async def graph_add(self, key: UserKey, fact: dict[str, Any], supersede: bool = False) -> Written[dict[str, Any]]:
        return await self._write(key, "graph_add", fact, supersede)

    async def graph_invalidate(self, key: UserKey, ref: dict[str, Any]) -> Written[dict[str, Any]]:
        return await self._write(key, "graph_invalidate", ref)

    async def graph_entity_put(self, key: UserKey, entity: dict[str, Any]) -> Written[dict[str, Any]]:
        return await self._write(key, "graph_entity_put", entity)

    async def graph_delete(self, key: UserKey, fact_id: str) -> Written[dict[str, Any]]:
        return await self._write(key, "graph_delete", fact_id)

    async def diary_write(self, key: UserKey, entry: dict[str, Any]) -> Written[dict[str, Any]]:
        return await self._write(key, "diary_write", entry)

    async def graph_restore(self, key: UserKey, data: UserGraph) -> Written[int]:
        return await self._write(key, "graph_restore", data)

    # ----------------------------------------------------------------- reads
    async def get(self, key: UserKey, entry_id: str) -> Entry:
        return await self.backend.call(key, "get", entry_id)

    async def read(self, key: UserKey, limit: int | None = None,
                   metadata_filter: dict[str, Any] | None = None) -> list[Entry]:
        return await self.backend.call(key, "read", limit, metadata_filter)

    async def search(self, key: UserKey, options: SearchOptions | dict[str, Any],
                     query_vector: Vectors | None = None) -> list[SearchHit]:
        return await self.backend.call(key, "search", options, query_vector)

    async def search_json(self, key: UserKey, options: dict[str, Any], query_vector: Vectors | None = None) -> bytes:
        args = (options,) if query_vector is None else (options, query_vector)
        return await self.backend.call(key, "search_json", *args)

    async def preload(self, key: UserKey, budget: int, message: str, mode: InjectionMode,
                      playbook: str | None, topics: list[str] | None = None,
                      topics_match: TopicsMatch = "any", max_tokens: int | None = None,
                      min_relevance: float | None = None, include_facts: bool = False) -> PreloadResult:
        return await self.backend.call(key, "preload", budget, message, mode, playbook, topics, topics_match,
                                       max_tokens, min_relevance, include_facts)

    async def recall(self, key: UserKey, query: str, session: str | None = None,
                     max_results: int = 10) -> list[RecallHit]:
        return await self.backend.call(key, "recall", query, session, max_results)

    async def search_facts(self, key: UserKey, query: str, max_tokens: int | None = None) -> dict[str, Any]:
        return await self.backend.call(key, "search_facts", query, max_tokens)

    async def graph_query(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.call(key, "graph_query", query)

    async def graph_timeline(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.call(key, "graph_timeline", query)

    async def graph_neighbourhood(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.call(key, "graph_neighbourhood", query)

    async def graph_entity(self, key: UserKey, name: str) -> dict[str, Any] | None:
        return await self.backend.call(key, "graph_entity", name)

    async def diary_read(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        return await self.backend.call(key, "diary_read", query)

    async def graph_export(self, key: UserKey) -> UserGraph:
        return await self.backend.call(key, "graph_export")

    async def graph_export_users(self, shard: int, app: str) -> list[str]:
        return await self.backend.call_shard(shard, "graph_export_users", app)

    async def export(self, key: UserKey) -> list[Entry]:
        return await self.backend.call(key, "export")

    async def export_users(self, shard: int, app: str) -> list[str]:
        return await self.backend.call_shard(shard, "export_users", app)

    async def job(self, shard: int, job_id: str) -> JobRecord:
        return await self.backend.call_shard(shard, "job", job_id)

    async def find_job(self, job_id: str) -> JobRecord:
        """The job ``job_id`` names: asked of the shard its id carries, then of the others (a job recorded before
        ``memctl reshard`` moved its user keeps its id, which names the old shard);
        :class:`memcore.errors.NotFoundError` when no shard has it or the id is malformed."""
        shard = job_shard(job_id)
        count = self.backend.settings.shards
        if shard is None:
            raise NotFoundError(f"job {job_id!r} not found", field="job_id")
        for k in ([shard] if shard < count else []) + [k for k in range(count) if k != shard]:
            try:
                return await self.job(k, job_id)
            except NotFoundError:
                continue
        raise NotFoundError(f"job {job_id!r} not found", field="job_id")

    async def wait_job(self, job: JobRecord, timeout_s: float) -> JobRecord:
        """Poll the job's shard until ``job`` is finished or ``timeout_s`` passed (:func:`memcore.records.wait_job`);
        a job id that names no shard is returned as it is."""
        shard = job_shard(job.job_id)
        if shard is None:
            return job
        return await records.wait_job(job, lambda job_id: self.job(shard, job_id), timeout_s)

    async def status(self) -> list[dict[str, Any]]:
        return await self.backend.status()


class Pending(Generic[T]):
    """A write sent to a shard whose answer is waited for later (:meth:`result` blocks)."""

    def __init__(self, get: Callable[[], Any]) -> None:
        self._get = get

    def result(self) -> Written[T]:
        return unwrap(self._get())


class SyncShardClient:
    """The shard calls of the Ray Data jobs, blocking, one typed method each (by shard number, or by the
    user's shard for :meth:`backfill`). :meth:`backfill` answers ``(value, FIFO sequence)`` through its
    :class:`Pending`; the generation steps answer their value (they are not a user's writes)."""

    def __init__(self, backend: SyncShardBackend) -> None:
        self.backend = backend

    @property
    def shards(self) -> range:
        return range(self.backend.settings.shards)

    def _read(self, shard: int, method: str, *args: Any) -> Any:
        return self.backend.call_shard_sync(shard, method, *args)

    def _write(self, shard: int, method: str, *args: Any) -> Any:
        value, _ = unwrap(self.backend.call_shard_sync(shard, method, *args))
        return value

    # ---------------------------------------------------------------- writes
    def backfill(self, key: UserKey, sessions: list[tuple[str, list[dict[str, Any]]]],
                 memories: list[dict[str, Any]], vectors: Vectors | None = None) -> Pending[dict[str, int]]:
        """Sent now; the answer (:meth:`Pending.result`) is waited for later, so the next batch is embedded
        meanwhile."""
        shard = shard_of(key, self.backend.settings.shards)
        return Pending(self.backend.submit_shard(shard, "backfill", key, sessions, memories, vectors))

    def begin_generation(self, shard: int, generation: int, apps: list[str], users: list[str]) -> dict[str, Any]:
        return self._write(shard, "begin_generation", generation, apps, users)

    def reextract_user(self, shard: int, generation: int, key: UserKey, extractor: dict[str, Any]) -> dict[str, Any]:
        return self._write(shard, "reextract_user", generation, key, extractor)

    def switch_generation(self, shard: int, generation: int) -> dict[str, Any]:
        return self._write(shard, "switch_generation", generation)

    def abort_generation(self, shard: int, generation: int) -> dict[str, Any]:
        return self._write(shard, "abort_generation", generation)

    def drop_generation(self, shard: int, generation: int) -> dict[str, Any]:
        return self._write(shard, "drop_generation", generation)

    # ----------------------------------------------------------------- reads
    def ping(self, shard: int) -> int:
        return self._read(shard, "ping")

    def embedder_info(self, shard: int) -> dict[str, Any]:
        return self._read(shard, "embedder_info")

    def generation_info(self, shard: int) -> dict[str, Any]:
        return self._read(shard, "generation_info")
