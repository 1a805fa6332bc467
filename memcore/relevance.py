"""What a hit's ``relevance`` means, declared once: its scale, the default floor, and how it is computed.

Every search hit carries two numbers. ``score`` ranks: the fused reciprocal-rank score of hybrid search
(:func:`memcore.fusion.rrf`; it says where a hit stands in its own list, not whether it matches at all) or
the cosine of dense search. ``relevance`` judges: the **cosine of the query's and the memory's embedding
vectors**, on the scale [:data:`MIN_RELEVANCE`, :data:`MAX_RELEVANCE`] = [-1, 1] (the vectors are
L2-normalised, so it is their dot product). It is computed for every hit, the ones only BM25 found
included (from the vector the store returns with the entry, one batch dot product), so it is comparable
across hits, searches and users.

The filters on it (``similarity_threshold`` of a search, Mem0's ``threshold``, the ``min_relevance`` of
``memory_search`` and of preload) keep hits with ``relevance >= floor``. With no floor given, a dense
search keeps the seeds' :data:`DENSE_THRESHOLD` and a hybrid search keeps everything: ranking and recall
are those of the engine without this filter.

:data:`DEFAULT_FLOOR` is the floor measured for the default embedder (``minilm-l3``) by
``python -m bench.relevance`` (``docs/benchmarks.md``, "Relevance"; LoCoMo-10): as preload's floor it
empties 76 % of the searches of another user's memories for -0.005 own-user session any@5. A floor is a
property of the embedder: measure another embedder's before choosing one. The cosine separates own from
other users' top hits with AUC 0.982 (the fused score: 0.746), as well as a mix with the keyword
evidence, so it is the scale.

This module imports nothing of the project but numpy: a leaf.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

MIN_RELEVANCE = -1.0
MAX_RELEVANCE = 1.0
"""The relevance scale: the cosine of the query and the memory vectors."""

DENSE_THRESHOLD = 0.3
"""The seeds' similarity threshold of a dense search (``hybrid=false``) when none is given."""

DEFAULT_FLOOR = 0.35
"""The documented floor for the default embedder (``minilm-l3``), measured by ``bench.relevance``."""


def cosines(query: npt.NDArray[np.float32], rows: npt.NDArray[np.float32]) -> list[float]:
    """The relevance of each row (an L2-normalised memory vector) to ``query``: one batch dot product,
    renormalised so that rows the store did not normalise land on the same scale; clipped to the scale."""
    q = np.asarray(query, dtype=np.float32).reshape(-1)
    m = np.asarray(rows, dtype=np.float32).reshape(-1, q.shape[0]) if len(rows) else np.zeros((0, q.shape[0]))
    norms = np.linalg.norm(m, axis=1) * (float(np.linalg.norm(q)) or 1.0)
    dots = m @ q / np.where(norms > 0, norms, 1.0)
    return [float(x) for x in np.clip(dots, MIN_RELEVANCE, MAX_RELEVANCE)]


def floor_of(threshold: float | None, *, hybrid: bool) -> float | None:
    """The floor a search applies: the one given, else :data:`DENSE_THRESHOLD` for a dense search and none
    (keep every hit) for a hybrid one."""
    if threshold is not None:
        return threshold
    return None if hybrid else DENSE_THRESHOLD
