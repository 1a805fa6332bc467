"""The seam between the HTTP ingress and the shards.

``ShardBackend`` is what the ingress awaits. Two implementations:

- :class:`RayShardBackend` (``actors.router``): named, detached Ray actors, one per shard;
- :class:`LocalShardBackend`: the same ShardCore objects in this process, for a dev server and
  for client tests that need real HTTP without a Ray cluster. Calls run in worker threads
  because the engines (Qdrant Edge, Tantivy, the embedder) are blocking libraries.

``SyncShardBackend`` is the same seam, blocking, for the Ray Data jobs; both backends have it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from actors.shard import Ack, ShardCore
from memcore.ids import shard_of
from memcore.model import UserKey
from memcore.ports import Embedder
from memcore.settings import Settings


class ShardBackend(Protocol):
    settings: Settings

    async def call(self, key: UserKey, method: str, *args: Any) -> Any:
        """Run ``ShardCore.<method>(key, *args)`` on the shard that owns ``key``."""
        ...

    async def call_shard(self, shard: int, method: str, *args: Any) -> Any:
        """Run ``ShardCore.<method>(*args)`` on shard ``shard`` (e.g. a job lookup by its id)."""
        ...

    async def status(self) -> list[dict[str, Any]]:
        """One status dict per shard; raises if a shard is unreachable."""
        ...


class SyncShardBackend(Protocol):
    """The blocking seam of the Ray Data jobs (:class:`actors.shard_client.SyncShardClient`)."""

    settings: Settings

    def call_shard_sync(self, shard: int, method: str, *args: Any) -> Any:
        """Run ``ShardCore.<method>(*args)`` on shard ``shard`` and wait for it (reads retried like ``call``)."""
        ...

    def submit_shard(self, shard: int, method: str, *args: Any) -> Callable[[], Any]:
        """Send the call now; the returned function waits for its result (a write: never retried)."""
        ...


class LocalShardBackend:
    def __init__(self, settings: Settings, embedder: Embedder | None = None) -> None:
        self.settings = settings
        self.shards = [ShardCore(settings, k, embedder) for k in range(settings.shards)]

    def core(self, key: UserKey) -> ShardCore:
        return self.shards[shard_of(key, self.settings.shards)]

    async def call(self, key: UserKey, method: str, *args: Any) -> Any:
        return await asyncio.to_thread(getattr(self.core(key), method), key, *args)

    async def call_shard(self, shard: int, method: str, *args: Any) -> Any:
        return await asyncio.to_thread(getattr(self.shards[shard], method), *args)

    async def status(self) -> list[dict[str, Any]]:
        return [await asyncio.to_thread(s.status) for s in self.shards]

    def call_shard_sync(self, shard: int, method: str, *args: Any) -> Any:
        return getattr(self.shards[shard], method)(*args)

    def submit_shard(self, shard: int, method: str, *args: Any) -> Callable[[], Any]:
        value = self.call_shard_sync(shard, method, *args)
        return lambda: value

    def close(self) -> None:
        for s in self.shards:
            s.close()


def unwrap(result: Any) -> tuple[Any, int | None]:
    """(value, FIFO sequence) of a shard result; reads have no sequence."""
    if isinstance(result, Ack):
        return result.value, result.seq
    return result, None
