"""The ports every store backend implements: vectors, keywords, embedders, extractors. Adapters live in
:mod:`memcore.stores`; the event archive's ports are :mod:`memcore.archive_ports`.

Contract shared by all adapters (the congruence tests check it):

- every method that takes a :class:`UserKey` applies it as a hard filter;
- entries are stored whole (the payload is the source of truth), tombstones included;
- ``search`` returns active entries only, best first, with cosine similarity scores;
- vectors are L2-normalised ``float32`` rows; ``Embedder`` returns them that way.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from memcore.model import Entry, Kind, UserKey
from memcore.search_model import TopicsMatch
from memcore.vocabulary import PolicyName

if TYPE_CHECKING:
    from memcore.extraction.events import Event, ExtractionResult

Vectors = npt.NDArray[np.float32]


@runtime_checkable
class VectorStore(Protocol):
    """Dense vectors plus the whole entry as payload."""

    dim: int

    def upsert(self, entries: Sequence[Entry], vectors: Vectors) -> None:
        """Insert or replace entries (by id) with their vectors (one row each)."""
        ...

    def set_payload(self, entries: Sequence[Entry]) -> None:
        """Replace the stored entries (by id) keeping their vectors."""
        ...

    def get(self, key: UserKey, ids: Sequence[str]) -> list[Entry]:
        """Entries of ``key`` with these ids, tombstones included; unknown ids are absent."""
        ...

    def get_with_vectors(self, key: UserKey, ids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        """:meth:`get` with each found entry's stored vector (one row each, in the entries' order): what a
        search scores the relevance of a hit only BM25 found with, without embedding it again."""
        ...

    def delete(self, key: UserKey, ids: Sequence[str]) -> None:
        """Hard-delete entries of ``key`` by id (unknown ids are ignored)."""
        ...

    def delete_user(self, key: UserKey) -> None:
        """Hard-delete every entry of ``key``."""
        ...

    def search(
        self,
        key: UserKey,
        vector: npt.NDArray[np.float32],
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[Entry, float]]:
        """Active entries of ``key`` nearest to ``vector`` (cosine), best first; ``metadata``: payload
        string equalities (``("metadata.<key>", value)``, see :func:`memcore.metadata.pushdown`);
        ``topics``: entries with any (``topics_match="any"``) or all (``"all"``) of these topics."""
        ...

    def search_points(
        self,
        key: UserKey,
        vector: npt.NDArray[np.float32],
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        metadata: Sequence[tuple[str, str]] = (),
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[str, float]]:
        """:meth:`search` without reading the entries: (point id, cosine) of each hit, best first, a point id
        being :func:`memcore.ids.point_id` of the entry id. What a hybrid pass fuses before it resolves the
        few hits it returns (:meth:`get_points`): reading 100 payloads costs a 40k-entry user's HNSW search
        about three times the search itself."""
        ...

    def get_points(self, key: UserKey, point_ids: Sequence[str]) -> tuple[list[Entry], Vectors]:
        """The entries of ``key`` stored under these point ids, tombstones included, with their stored vectors
        (one row each, in the entries' order, which is the store's); unknown ids are absent."""
        ...

    def scroll(self, key: UserKey | None = None, *, include_deleted: bool = True) -> Iterator[Entry]:
        """Every entry of ``key`` (or of the whole store when ``key`` is None)."""
        ...

    def scroll_with_vectors(
        self, key: UserKey | None = None, *, include_deleted: bool = True
    ) -> Iterator[tuple[list[Entry], Vectors]]:
        """Pages of (entries, their stored vectors, one row each) of ``key`` (or of the whole store): what a
        generation copies into another store, and what a compaction rewrites, without embedding again."""
        ...

    def count(self, key: UserKey | None = None, *, include_deleted: bool = False) -> int:
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class KeywordIndex(Protocol):
    """BM25 over text and topics of active entries; derived, rebuildable from the vector store."""

    needs_rebuild: bool
    """True when the index was opened after a crash that lost staged writes."""

    def upsert(self, entries: Sequence[Entry]) -> None:
        """Index entries (replacing by id); tombstoned entries are removed instead."""
        ...

    def delete(self, ids: Sequence[str]) -> None:
        ...

    def delete_user(self, key: UserKey) -> None:
        ...

    def search(
        self,
        key: UserKey,
        query: str,
        *,
        limit: int,
        kind: Kind | None = None,
        time_from: datetime | None = None,
        time_to: datetime | None = None,
        topics: Sequence[str] = (),
        topics_match: TopicsMatch = "any",
    ) -> list[tuple[str, float]]:
        """(entry id, BM25 score) of active entries of ``key`` (with any or all of ``topics`` when
        given), best first. Never raises on odd query text."""
        ...

    def rebuild(self, entries: Iterator[Entry]) -> int:
        """Drop everything and index ``entries`` (active ones); returns the number indexed."""
        ...

    def count(self) -> int:
        """Number of indexed documents (for staleness checks)."""
        ...

    def close(self) -> None:
        ...


@runtime_checkable
class Embedder(Protocol):
    """Text to L2-normalised float32 vectors; queries and passages may be encoded differently."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed_passages(self, texts: Sequence[str]) -> Vectors:
        ...

    def embed_queries(self, texts: Sequence[str]) -> Vectors:
        ...


class Extractor(Protocol):
    """Turns a conversation delta plus existing entries into proposed operations.

    ``delta`` holds user/assistant text events only (see :func:`memcore.extraction.events.extractable`);
    ``now`` resolves relative times. Rejected model output is reported in the result, never
    raised; a failed model call raises :class:`memcore.errors.ExtractorError`.
    Implementations: :class:`memcore.extraction.llm.LLMExtractor`,
    :class:`memcore.extraction.verbatim.VerbatimExtractor`; a wrapper (a deadline, a stopwatch)
    derives from :class:`memcore.extraction.wrapper.ExtractorWrapper`, which forwards the
    capabilities below by construction.

    Capabilities (read by the callers instead of the concrete type):

    - ``default_policy``: the update policy its operations are applied with (verbatim turns:
      ``append_only``; a model extractor: the policy its prompt was written for);
    - ``uses_existing``: whether it reads the existing entries (False: the caller skips the
      existing-entry search unless another stage needs them);
    - ``max_events``: the most delta events one call should get (None: a whole session at once).
    """

    @property
    def default_policy(self) -> PolicyName: ...

    @property
    def uses_existing(self) -> bool: ...

    @property
    def max_events(self) -> int | None: ...

    def extract(
        self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None
    ) -> ExtractionResult:
        ...
