"""Routing to named, detached shard actors on Ray.

Shard ``k`` is the actor ``shard-{k}`` in the settings' namespace, created idempotently
(``get_if_exists``) and restarted by Ray after a crash (``max_restarts=-1``) under the same name;
it then reopens its stores (see :class:`actors.shard.ShardCore`). Users map to shards by the
stable hash of (app, user) — never Python's ``hash()``. Shards are placed with Ray's ``SPREAD``
strategy, so a lost node takes as few writers as possible with it (and they restart elsewhere).

Reads that hit a restarting actor are retried for up to ``read_retry_s``; writes are not
retried here (an update is not idempotent): they fail with a StoreError (HTTP 503 + retry hint).
An ingest is a write here too: its job is accepted only once the shard answered. Every call runs
under the caller's trace when tracing is on. A domain error raised in a shard (a
:class:`memcore.errors.MemoryServiceError`, which Ray delivers wrapped as ``RayTaskError(<class>)``)
is re-raised here as itself (:func:`domain_cause`), so every caller (REST, Mem0, MCP, the jobs) sees
``ValidationError``, never the wrapper. The same calls, blocking (``call_shard_sync``,
``submit_shard``), serve the Ray Data jobs (:class:`actors.shard_client.SyncShardClient`): a job
never creates shards (``create=False``: a missing one is :class:`ClusterNotRunning`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

from actors.shard import READS, ShardCore
from memcore import tracing
from memcore.errors import MemoryServiceError, StoreError
from memcore.ids import shard_of
from memcore.model import UserKey
from memcore.ports import Embedder
from memcore.settings import Settings


def actor_name(shard: int) -> str:
    return f"shard-{shard}"


def domain_cause(exc: MemoryServiceError) -> MemoryServiceError:
    """The domain error behind ``exc``: the ``.cause`` of a Ray task error (``RayTaskError(ValidationError)``
    is also a ValidationError but names the wrapper), else ``exc`` itself."""
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, MemoryServiceError) else exc


class ClusterNotRunning(RuntimeError):
    """The shard actors of the settings' namespace are not there (a job asked for them)."""


class RayShardBackend:
    def __init__(
        self,
        settings: Settings,
        embedder_factory: Callable[[], Embedder | None] | None = None,
        *,
        max_concurrency: int = 32,
        read_retry_s: float = 30.0,
        create: bool = True,
    ) -> None:
        """``create`` False: only attach to running shard actors (the jobs), never start one."""
        self.settings = settings
        self._create = create
        self._embedder_factory = embedder_factory
        self._max_concurrency = max_concurrency
        self._read_retry_s = read_retry_s
        self._actors: dict[int, Any] = {}

    def actor(self, shard: int) -> Any:
        """The handle of shard ``shard``, creating the actor if it does not exist yet."""
        handle = self._actors.get(shard)
        if handle is None and not self._create:
            handle = self._actors[shard] = self._running(shard)
        if handle is None:
            import ray

            embedder = self._embedder_factory() if self._embedder_factory else None
            remote_cls = ray.remote(ShardCore)
            handle = remote_cls.options(  # type: ignore[attr-defined]
                name=actor_name(shard),
                namespace=self.settings.namespace,
                lifetime="detached",
                get_if_exists=True,
                max_restarts=-1,
                max_task_retries=0,
                max_concurrency=self._max_concurrency,
                num_cpus=0,
                scheduling_strategy="SPREAD",
            ).remote(self.settings, shard, embedder)
            self._actors[shard] = handle
        return handle

    def _running(self, shard: int) -> Any:
        import ray

        try:
            return ray.get_actor(actor_name(shard), namespace=self.settings.namespace)
        except ValueError as exc:
            raise ClusterNotRunning(
                f"shard actor {actor_name(shard)!r} not found in namespace {self.settings.namespace!r}: "
                "is memcluster running (memctl up)?") from exc

    def ensure_all(self) -> list[Any]:
        return [self.actor(k) for k in range(self.settings.shards)]

    async def call(self, key: UserKey, method: str, *args: Any) -> Any:
        shard = shard_of(key, self.settings.shards)
        return await self._invoke(shard, method, key, *args)

    async def call_shard(self, shard: int, method: str, *args: Any) -> Any:
        return await self._invoke(shard, method, *args)

    async def status(self) -> list[dict[str, Any]]:
        return list(await asyncio.gather(*(self._invoke(k, "status") for k in range(self.settings.shards))))

    def call_shard_sync(self, shard: int, method: str, *args: Any) -> Any:
        """:meth:`call_shard`, blocking (a Ray Data job's worker; reads retried the same way)."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        deadline = time.monotonic() + self._read_retry_s
        delay = 0.05
        while True:
            try:
                return ray.get(self._remote(shard, method, *args))
            except MemoryServiceError as exc:
                raise domain_cause(exc) from None
            except (RayActorError, ActorUnavailableError) as exc:
                self._retry_or_raise(shard, method, exc, deadline)
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def submit_shard(self, shard: int, method: str, *args: Any) -> Callable[[], Any]:
        """Send a write now, wait for its result later (the returned function blocks); never retried."""
        import ray
        from ray.exceptions import ActorUnavailableError, RayActorError

        ref = self._remote(shard, method, *args)

        def result() -> Any:
            try:
                return ray.get(ref)
            except MemoryServiceError as exc:
                raise domain_cause(exc) from None
            except (RayActorError, ActorUnavailableError) as exc:
                self._retry_or_raise(shard, method, exc, 0.0)
                raise

        return result

    def _remote(self, shard: int, method: str, *args: Any) -> Any:
        """The call's object ref, under the caller's trace when tracing is on."""
        carrier = tracing.carrier()  # None unless tracing is on
        if carrier is not None:
            return self.actor(shard).traced.remote(carrier, method, *args)
        return getattr(self.actor(shard), method).remote(*args)

    def _retry_or_raise(self, shard: int, method: str, exc: Exception, deadline: float) -> None:
        """Return when the call may be tried again (a read before ``deadline``); else a StoreError."""
        if method not in READS or time.monotonic() > deadline:
            raise StoreError(
                f"shard {shard} is restarting ({type(exc).__name__}); retry the request", field="shard"
            ) from exc

    async def _invoke(self, shard: int, method: str, *args: Any) -> Any:
        from ray.exceptions import ActorUnavailableError, RayActorError

        deadline = time.monotonic() + self._read_retry_s
        delay = 0.05
        while True:
            try:
                return await self._remote(shard, method, *args)
            except MemoryServiceError as exc:
                raise domain_cause(exc) from None
            except (RayActorError, ActorUnavailableError) as exc:
                self._retry_or_raise(shard, method, exc, deadline)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
