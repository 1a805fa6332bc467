"""What a hit's ``relevance`` means, declared once: its scale, the default floor, and how it is computed.

Every search hit carries two numbers. ``score`` ranks: the fused reciprocal-rank score of hybrid search
(:func:`memcore.fusion.rrf`; it says where a hit stands in its own list, not whether it matches at all) or
the cosine of dense search. ``relevance`` judges, on the scale [:data:`MIN_RELEVANCE`,
:data:`MAX_RELEVANCE`] = [-1, 1]:

    relevance = cosine(query vector, memory vector) - NAME_PENALTY x (share of the query's names the memory lacks)

The cosine is the vectors' dot product (they are L2-normalised), computed for every hit, the ones only BM25
found included (from the vector the store returns with the entry, one batch dot product). The names are
the query's capitalised words that start no sentence (:func:`memcore.query.query_names`: people, places,
titles); a memory that contains none of them loses :data:`NAME_PENALTY`, one that contains half of them
half of it. A query without names (lower case, or none given) is judged by the cosine alone. The check is
there because an embedder's cosine is topical: "What are the names of Andrew's dogs?" is as close to
another user's memories about *their* dogs as to Andrew's, and the name is what tells them apart. So the
number is comparable across hits, searches and users.

The filters on it (``similarity_threshold`` of a search, Mem0's ``threshold``, the ``min_relevance`` of
``memory_search`` and of preload) keep hits with ``relevance >= floor``. With no floor given, a dense
search keeps the seeds' :data:`DENSE_THRESHOLD` on its cosine and a hybrid search keeps everything:
ranking and recall are those of the engine without this filter.

:data:`DEFAULT_FLOOR` is the floor measured for the default embedder (``minilm-l3``) by
``python -m bench.relevance`` (``docs/benchmarks.md``, "Relevance"; LoCoMo-10): on each hit it empties
89 % of the searches of another user's memories for -0.003 own-user session any@5 (the relevance
separates own from other users' top hits with AUC 0.995; the cosine alone 0.982, the fused score 0.746).
For a query that names nobody it is the cosine's floor: it empties about half of those searches. A floor
is a property of the embedder: measure another embedder's before choosing one.

This module imports nothing of the project but numpy: a leaf.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

MIN_RELEVANCE = -1.0
MAX_RELEVANCE = 1.0
"""The relevance scale: a cosine's (the name penalty never takes a relevance below it)."""

DENSE_THRESHOLD = 0.3
"""The seeds' similarity threshold of a dense search (``hybrid=false``) when none is given."""

DEFAULT_FLOOR = 0.3
"""The documented floor for the default embedder (``minilm-l3``), measured by ``bench.relevance``."""

NAME_PENALTY = 0.1
"""What a memory's relevance loses when it contains none of the names its query gives (a share of it when
it contains some): :class:`Judge`."""


def cosines(query: npt.NDArray[np.float32], rows: npt.NDArray[np.float32]) -> list[float]:
    """The relevance of each row (an L2-normalised memory vector) to ``query``: one batch dot product,
    renormalised so that rows the store did not normalise land on the same scale; clipped to the scale."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    m = np.asarray(rows, dtype=np.float32).reshape(-1, q.shape[0]) if len(rows) else np.zeros((0, q.shape[0]))
    norms = np.linalg.norm(m, axis=1) * (float(np.linalg.norm(q)) or 1.0)
    dots = m @ q / np.where(norms > 0, norms, 1.0)
    return [float(x) for x in np.clip(dots, MIN_RELEVANCE, MAX_RELEVANCE)]


def floor_of(threshold: float | None, *, hybrid: bool) -> float | None:
    """The floor a search applies: the one given (on the relevance), else :data:`DENSE_THRESHOLD` for a dense
    search (on its cosine, as the seeds have it) and none (keep every hit) for a hybrid one."""
    if threshold is not None:
        return threshold
    return None if hybrid else DENSE_THRESHOLD


class Judge:
    """The relevance of a query's hits: a hit's cosine less :data:`NAME_PENALTY` times the share of the
    query's ``names`` (lowercased, :func:`memcore.query.query_names`) that its text lacks (whole words, any
    case: ``andrew`` is in "Andrew's dog", not in "Andrews")."""

    __slots__ = ("_names",)

    def __init__(self, names: Iterable[str]) -> None:
        self._names = sorted({n.lower() for n in names if n})

    def penalty(self, text: str) -> float:
        """What a memory of ``text`` loses: 0 when it contains every name (or the query gives none)."""
        if not self._names:
            return 0.0
        low = text.lower()
        missing = sum(1 for n in self._names if not _has_word(low, n))
        return NAME_PENALTY * missing / len(self._names)

    def __call__(self, cosine: float, text: str) -> float:
        """The relevance of a memory of ``text`` whose vector has ``cosine`` to the query's; on the scale."""
        return max(MIN_RELEVANCE, cosine - self.penalty(text)) if self._names else cosine


def _has_word(text: str, word: str) -> bool:
    """Whether ``word`` occurs in ``text`` with no letter, digit, ``_`` or ``-`` on either side (a plain
    ``str.find`` scan: a search judges every hit of a chunk, and a regular expression cost 10 µs a hit)."""
    at = text.find(word)
    while at >= 0:
        end = at + len(word)
        if (at == 0 or not _joins(text[at - 1])) and (end == len(text) or not _joins(text[end])):
            return True
        at = text.find(word, at + 1)
    return False


def _joins(ch: str) -> bool:
    return ch.isalnum() or ch in "_-"
