"""Where a shard keeps its data and which entries it owns: :class:`ShardLayout`, the one home of every
path, marker and pointer of a shard's directory.

``<data_dir>/shards/<shard:04d>/`` holds:

- generation 1 of the stores (``vectors/``, ``keywords/``, and ``vectors.users/``: the dedicated vector
  stores of large users, :mod:`memcore.stores.edge_tiers`); generation N >= 2 lives in ``gen-000N/``
  (``vectors/`` at the same relative place under ``shared_vectors_dir`` when that is set: a volume every
  node sees, while the rest is node-local, ``MEMCLUSTER_NODE_DATA_DIR``, :meth:`memcore.settings.Settings.on_this_node`)
  (with the Qdrant server backend its vectors are the collection ``<collection>_gN``,
  :func:`generation_collection`, and only the keyword index is on disk);
- ``current``: the generation the shard serves (missing: 1, or with the server backend the one the
  alias ``<collection>`` points at, :func:`memcore.factory.current_generation`), replaced atomically
  (temp file, fsync, ``os.replace``, fsync of the directory);
- ``keywords.compact/`` beside a generation's ``keywords/``: the index a compaction is rebuilding
  (deleted when the shard opens after a crash left it);
- ``archive.sqlite3`` and ``seq.sqlite3``: the event archive and the write counter
  (:mod:`memcore.stores.sqlite_archive`; with ``archive.backend: postgres`` neither, they live in the
  database every shard shares, :mod:`memcore.stores.postgres_archive`);
- the markers ``keywords.dirty`` (a write is under way: a shard that dies mid-write rebuilds its keyword
  index on start) and ``compact.needed`` (something was removed for good since the last compaction).

Ownership (:meth:`ShardLayout.owns`, the one predicate): with embedded stores (``edge``) a shard's vector
store holds only its own users, so every entry in it is its own; with the server backend all shards
share one collection and shard k owns the users that :func:`memcore.ids.shard_of` routes to k.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from memcore.ids import shard_of
from memcore.model import Entry, UserKey
from memcore.ports import KeywordIndex, VectorStore
from memcore.settings import Settings

VECTORS, KEYWORDS, FRESH_KEYWORDS = "vectors", "keywords", "keywords.compact"
CURRENT_FILE = "current"
ARCHIVE_FILE, SEQUENCE_FILE = "archive.sqlite3", "seq.sqlite3"
DIRTY_MARKER, COMPACT_MARKER = "keywords.dirty", "compact.needed"
VECTOR_TIERS_SUFFIX = ".users"
_GEN_DIR = re.compile(r"^gen-(\d{4,})$")


def tiers_dir(vectors: str | Path) -> Path:
    """Beside a generation's embedded ``vectors`` directory: the dedicated stores of its large users."""
    vectors = Path(vectors)
    return vectors.with_name(vectors.name + VECTOR_TIERS_SUFFIX)


def generation_collection(collection: str, generation: int = 1) -> str:
    """The Qdrant server collection of a generation (generation 1 keeps the configured name)."""
    return collection if generation == 1 else f"{collection}_g{generation}"


def collection_generation(collection: str, name: str | None) -> int:
    """The generation whose collection is ``name`` (the inverse of :func:`generation_collection`; 1 when
    ``name`` is none of them)."""
    prefix = f"{collection}_g"
    if name and name.startswith(prefix) and name[len(prefix):].isdigit():
        return max(1, int(name[len(prefix):]))
    return 1


@dataclass(frozen=True)
class ShardLayout:
    settings: Settings
    shard: int

    # ------------------------------------------------------------------ paths
    @property
    def root(self) -> Path:
        return Path(self.settings.data_dir) / "shards" / f"{self.shard:04d}"

    @property
    def archive_path(self) -> Path:
        return self.root / ARCHIVE_FILE

    @property
    def sequence_path(self) -> Path:
        return self.root / SEQUENCE_FILE

    @property
    def dirty_marker(self) -> Path:
        return self.root / DIRTY_MARKER

    @property
    def compact_marker(self) -> Path:
        return self.root / COMPACT_MARKER

    def generation_dir(self, generation: int = 1) -> Path:
        """Where generation ``generation`` keeps its vectors and keywords."""
        if generation < 1:
            raise ValueError("generations are numbered from 1")
        return self.root if generation == 1 else self.root / f"gen-{generation:04d}"

    def vectors_dir(self, generation: int = 1) -> Path:
        """The generation's Qdrant Edge directory: in the shard's directory, or under ``shared_vectors_dir``
        (a volume every node sees) at the same relative place."""
        shared = self.settings.shared_vectors_dir
        if shared is None:
            return self.generation_dir(generation) / VECTORS
        return Path(shared) / self.generation_dir(generation).relative_to(Path(self.settings.data_dir)) / VECTORS

    def keywords_dir(self, generation: int = 1) -> Path:
        return self.generation_dir(generation) / KEYWORDS

    def fresh_keywords_dir(self, generation: int = 1) -> Path:
        """The keyword index a compaction of ``generation`` builds before swapping it in."""
        return self.generation_dir(generation) / FRESH_KEYWORDS

    def collection(self, generation: int = 1) -> str:
        return generation_collection(self.settings.vector_store.collection, generation)

    # ------------------------------------------------------------ generations
    def generations_on_disk(self) -> list[int]:
        """Generations with a directory under the shard (1 when its stores exist), ascending."""
        base = self.root
        found = {1} if (base / VECTORS).exists() or (base / KEYWORDS).exists() else set()
        if base.is_dir():
            found |= {int(m.group(1)) for p in base.iterdir() if p.is_dir() and (m := _GEN_DIR.match(p.name))}
        return sorted(found)

    def pointer(self) -> int | None:
        """The generation the ``current`` file names (None without one)."""
        path = self.root / CURRENT_FILE
        try:
            text = path.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            return None
        if not text.isdigit() or int(text) < 1:
            raise ValueError(f"{path} holds {text!r}, not a generation number")
        return int(text)

    def point_at(self, generation: int) -> None:
        """Make ``current`` name ``generation``, in one atomic, durable step."""
        base = self.root
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".{CURRENT_FILE}.{os.getpid()}.tmp"
        with tmp.open("w", encoding="utf-8") as fh:
            fh.write(f"{generation}\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, base / CURRENT_FILE)
        fd = os.open(base, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def wipe(self, generation: int) -> None:
        """Delete generation ``generation``'s stores on disk (the archive and markers stay)."""
        if generation == 1:
            for path in (self.vectors_dir(1), tiers_dir(self.vectors_dir(1)), self.keywords_dir(1)):
                shutil.rmtree(path, ignore_errors=True)
        else:
            shutil.rmtree(self.vectors_dir(generation), ignore_errors=True)
            shutil.rmtree(self.generation_dir(generation), ignore_errors=True)

    def swap_in_keywords(self, generation: int) -> None:
        """Replace the generation's (closed) keyword index by the fresh one (a lost index is rebuilt at open)."""
        shutil.rmtree(self.keywords_dir(generation), ignore_errors=True)
        os.replace(self.fresh_keywords_dir(generation), self.keywords_dir(generation))

    # -------------------------------------------------------------- ownership
    @property
    def embedded(self) -> bool:
        """True when each shard has its own vector store (everything in it is the shard's)."""
        return self.settings.vector_store.backend == "edge"

    def owns(self, key: UserKey) -> bool:
        """Does this shard own the entries of ``key``? (Asked of entries found in its vector store.)"""
        return self.embedded or shard_of(key, self.settings.shards) == self.shard

    def owned(self, entries: Iterable[Entry]) -> Iterator[Entry]:
        """The entries of ``entries`` that this shard owns."""
        return (e for e in entries if self.owns(e.key))

    def owned_count(self, vectors: VectorStore) -> int:
        """Active entries of ``vectors`` this shard owns (the whole store in embedded mode)."""
        if self.embedded:
            return vectors.count(None)
        return sum(1 for _ in self.owned(vectors.scroll(None, include_deleted=False)))

    def reindex(self, vectors: VectorStore, keywords: KeywordIndex) -> int:
        """Rebuild ``keywords`` from the active entries of ``vectors`` this shard owns (the one keyword
        rebuild: on start after a crash, and after a compaction); returns the documents indexed."""
        return keywords.rebuild(self.owned(vectors.scroll(None, include_deleted=False)))

    def stale(self, vectors: VectorStore, keywords: KeywordIndex) -> bool:
        """Whether ``keywords`` misses writes: a crash lost staged ones, or it counts other documents than
        the entries it should hold."""
        return keywords.needs_rebuild or keywords.count() != self.owned_count(vectors)
