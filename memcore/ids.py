"""Canonical, content-addressed memory ids and the stable shard hash.

The id is ``sha256`` over the normalised text, the app, the user and the canonical
episodic metadata (kind, UTC event time, sorted normalised participants, location).
Topics, source and provenance are excluded: re-tagging never changes an id.

A memory with a caller key (``item_key``) is addressed by the key instead: ``sha256`` over
(app, user, key), so a write under the same key lands on the same entry and replaces it.
"""

from __future__ import annotations

import hashlib
import json
import uuid

from memcore.model import Memory, UserKey
from memcore.text import normalize


def memory_id(key: UserKey, memory: Memory) -> str:
    """The canonical id of ``memory`` for ``key`` (64 hex characters)."""
    if memory.item_key is not None:
        keyed = {"v": 1, "app": key.app, "user": key.user, "key": memory.item_key}
        blob = json.dumps(keyed, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode("utf-8")).hexdigest()
    event = memory.event_time.isoformat() if memory.event_time else ""
    canonical = {
        "v": 1,
        "app": key.app,
        "user": key.user,
        "text": normalize(memory.text),
        "kind": memory.kind.value,
        "event_time": event,
        "participants": sorted({normalize(p) for p in memory.participants}),
        "location": normalize(memory.location or ""),
    }
    blob = json.dumps(canonical, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def route_hash(key: UserKey) -> int:
    """The 64-bit number (0 <= n < 2**64) :func:`shard_of` takes modulo the shard count; an archive shared by
    every shard stores it with each row, so a shard selects its users in the database."""
    digest = hashlib.blake2b(f"{key.app}\x00{key.user}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def shard_of(key: UserKey, shards: int) -> int:
    """Stable shard of (app, user) in ``range(shards)``; the same in every process."""
    if shards < 1:
        raise ValueError("shards must be at least 1")
    return route_hash(key) % shards


def point_id(entry_id: str) -> str:
    """A UUID string derived from the whole entry id (Qdrant point ids are UUIDs or integers)."""
    return str(uuid.UUID(bytes=hashlib.sha256(entry_id.encode("utf-8")).digest()[:16]))
