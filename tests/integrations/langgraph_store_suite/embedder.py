"""The suites' ``CharacterEmbeddings`` as the live memcluster's embedder."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from tests.integrations.langgraph_store_suite.embed_test_utils import CharacterEmbeddings


class CharacterEmbedder:
    """The suites' ``CharacterEmbeddings`` as a memcluster embedder (L2-normalised float32 rows)."""

    def __init__(self, dims: int = 500) -> None:
        self.dim, self.name = dims, f"character-{dims}"
        self._embeddings = CharacterEmbeddings(dims=dims)
        self._lock = threading.Lock()  # its projections are drawn lazily from one seeded RNG

    def vector(self, text: str) -> list[float]:
        return [float(x) for x in self._encode([text])[0]]

    def _encode(self, texts: Sequence[str]) -> Any:
        with self._lock:
            rows = self._embeddings.embed_documents(list(texts))
        return np.asarray(rows, dtype=np.float32).reshape(len(rows), self.dim)

    def embed_passages(self, texts: Sequence[str]) -> Any:
        return self._encode(texts)

    def embed_queries(self, texts: Sequence[str]) -> Any:
        return self._encode(texts)
