"""Where a shard keeps its data and which entries it owns: the one home of the shard layout.

Directories: ``<data_dir>/shards/<shard:04d>/`` holds generation 1 (``vectors``, ``keywords``),
the event archive, the keyword-index dirty marker and the ``current`` generation pointer;
generation N >= 2 lives in ``gen-000N/``. With the Qdrant server backend generation N >= 2 is
the collection ``<collection>_gN``.

Ownership (:func:`owns`, the one predicate): with embedded stores (``edge``) a shard's vector
store holds only its own users, so every entry in it is its own; with the server backend all
shards share one collection and shard k owns the users that :func:`memcore.ids.shard_of` routes
to k.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from memcore.ids import shard_of
from memcore.model import Entry, UserKey
from memcore.ports import VectorStore
from memcore.settings import Settings

CURRENT_FILE = "current"
_GEN_DIR = re.compile(r"^gen-(\d{4,})$")


def shard_dir(settings: Settings, shard: int) -> Path:
    return Path(settings.data_dir) / "shards" / f"{shard:04d}"


def generation_dir(settings: Settings, shard: int, generation: int = 1) -> Path:
    """Where generation ``generation`` of shard ``shard`` keeps its vectors and keywords."""
    if generation < 1:
        raise ValueError("generations are numbered from 1")
    base = shard_dir(settings, shard)
    return base if generation == 1 else base / f"gen-{generation:04d}"


def generation_collection(collection: str, generation: int = 1) -> str:
    """The Qdrant server collection of a generation (generation 1 keeps the configured name)."""
    return collection if generation == 1 else f"{collection}_g{generation}"


def generations_on_disk(settings: Settings, shard: int) -> list[int]:
    """Generations with a directory under the shard (1 when its legacy stores exist), ascending."""
    base = shard_dir(settings, shard)
    found = {1} if (base / "vectors").exists() or (base / "keywords").exists() else set()
    if base.is_dir():
        found |= {int(m.group(1)) for p in base.iterdir() if p.is_dir() and (m := _GEN_DIR.match(p.name))}
    return sorted(found)


def embedded(settings: Settings) -> bool:
    """True when each shard has its own vector store (everything in it is the shard's)."""
    return settings.vector_store.backend == "edge"


def owns(settings: Settings, shard: int, key: UserKey) -> bool:
    """Does shard ``shard`` own the entries of ``key``? (Asked of entries found in its vector store.)"""
    return embedded(settings) or shard_of(key, settings.shards) == shard


def owned(settings: Settings, shard: int, entries: Iterable[Entry]) -> Iterator[Entry]:
    """The entries of ``entries`` that shard ``shard`` owns."""
    return (e for e in entries if owns(settings, shard, e.key))


def owned_entries_count(vectors: VectorStore, settings: Settings, shard: int) -> int:
    """Active entries this shard owns (the whole store in embedded mode)."""
    if embedded(settings):
        return vectors.count(None)
    return sum(1 for _ in owned(settings, shard, vectors.scroll(None, include_deleted=False)))
