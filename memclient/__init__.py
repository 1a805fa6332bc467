"""memclient: the Python client for memcluster (httpx only; no Ray, pydantic or stores).

::

    from memclient import MemoryClient

    with MemoryClient("http://127.0.0.1:8000", api_key="...") as mc:
        entry = mc.add("my-app", "alice", "Alice prefers tea over coffee.", topics=["drinks"])
        hits = mc.search("my-app", "alice", "what does alice drink?")
        block = mc.preload("my-app", "alice", budget=10, message="Coffee or tea?").text

:class:`AsyncMemoryClient` has the same methods, awaited.
"""

from __future__ import annotations

from memclient._async import AsyncMemoryClient
from memclient._sync import MemoryClient
from memclient.errors import (
    AuthError,
    Conflict,
    InvalidRequest,
    MemclientError,
    NotFound,
    Unavailable,
    Unreachable,
)
from memclient.retry import Retry
from memclient.types import Entry, Job, PreloadResult, SearchHit, SearchResults

__all__ = [
    "AsyncMemoryClient",
    "AuthError",
    "Conflict",
    "Entry",
    "InvalidRequest",
    "Job",
    "MemclientError",
    "MemoryClient",
    "NotFound",
    "PreloadResult",
    "Retry",
    "SearchHit",
    "SearchResults",
    "Unavailable",
    "Unreachable",
]
