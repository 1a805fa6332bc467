"""The one swap of the vendored suites: the store they construct is a :class:`MemclusterStore` against the
live memcluster of the module (``conftest.py`` starts it and sets :attr:`LiveStore.url`).

``LiveStore(index=...)`` stands for ``InMemoryStore(index=...)`` and ``SqliteStore.from_conn_string(...,
index=...)``: each store is a fresh memcluster app (so every test starts from an empty store, as with a
new ``InMemoryStore``), the index config's ``fields`` / ``text_fields`` become ``index_fields`` and its
``embed`` is the service's embedder (the suite's server embeds with the same ``CharacterEmbeddings``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, ClassVar
from uuid import uuid4

from memclient import AsyncMemoryClient, MemoryClient
from memclient.integrations.langgraph import MemclusterStore


def _fields(index: Mapping[str, Any] | None) -> list[str] | None:
    fields = (index or {}).get("fields") or (index or {}).get("text_fields")
    return None if fields is None or list(fields) == ["$"] else list(fields)


class LiveStore(MemclusterStore):
    """A MemclusterStore on a new app of the suite's live service."""

    url: ClassVar[str] = ""
    opened: ClassVar[list[LiveStore]] = []

    def __init__(self, *, index: Mapping[str, Any] | None = None, **_: Any) -> None:
        if not self.url:
            raise RuntimeError("the suite's memcluster is not running (conftest sets LiveStore.url)")
        super().__init__(MemoryClient(self.url), AsyncMemoryClient(self.url), app=f"lgs-{uuid4().hex[:16]}",
                         index_fields=_fields(index))
        self.index_config = dict(index) if index is not None else None
        LiveStore.opened.append(self)

    # SqliteStore's constructor and setup (the connection string names nothing here)
    @classmethod
    @contextmanager
    def from_conn_string(cls, conn_string: str, *, index: Mapping[str, Any] | None = None,
                         **_: Any) -> Iterator[LiveStore]:
        yield cls(index=index)

    def setup(self) -> None:
        """Nothing to migrate: the service owns its storage."""


class AsyncLiveStore(LiveStore):
    """``AsyncSqliteStore.from_conn_string`` (an async context manager) and its ``await setup()``."""

    @classmethod
    @asynccontextmanager  # type: ignore[override]
    async def from_conn_string(cls, conn_string: str, *, index: Mapping[str, Any] | None = None,
                               **_: Any) -> AsyncIterator[AsyncLiveStore]:
        yield cls(index=index)

    async def setup(self) -> None:  # type: ignore[override]
        """Nothing to migrate: the service owns its storage."""
