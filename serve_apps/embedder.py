"""The Embedder deployment: one model per replica, requests micro-batched with ``@serve.batch``.

Shard actors reach it through :class:`actors.remote_embedder.RemoteEmbedder`; single texts
from many concurrent callers are grouped into one model call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from ray import serve

from memcore.factory import build_embedder
from memcore.settings import EmbedderSettings

DEPLOYMENT_NAME = "Embedder"


class EmbedderDeployment:
    """A plain class; :mod:`serve_apps.builder` turns it into a deployment at build time."""

    def __init__(self, config: EmbedderSettings | dict[str, Any]) -> None:
        cfg = EmbedderSettings.model_validate(config)
        self.embedder = build_embedder(cfg)

    def describe(self) -> dict[str, Any]:
        return {"name": self.embedder.name, "dim": self.embedder.dim}

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.002)
    async def embed_queries(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.embedder.embed_queries(texts))

    @serve.batch(max_batch_size=64, batch_wait_timeout_s=0.005)
    async def embed_passages(self, texts: list[str]) -> list[np.ndarray]:
        return list(self.embedder.embed_passages(texts))

    def embed_passages_many(self, texts: list[str]) -> np.ndarray:
        """One call for a large list (bulk writes): no per-text batching round trip."""
        return self.embedder.embed_passages(texts)
