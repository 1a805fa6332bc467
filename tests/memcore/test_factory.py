"""memcore.factory's server seam: a shared in-process engine serves several threads as a server would."""

from __future__ import annotations

import threading

import numpy as np
from qdrant_client import QdrantClient, models

from memcore import factory
from memcore.settings import Settings

URL = "http://factory-test-qdrant.invalid:6333"


def test_a_shared_client_takes_turns_so_concurrent_writers_keep_every_vector() -> None:
    """Two threads upserting into one collection of qdrant-client's in-process engine misalign its arrays
    without turns (a point read back with another's vector, or ``IndexError``); through the seam each call
    is applied whole."""
    raw = QdrantClient(":memory:")
    shared = factory.share_qdrant_client(URL, raw)
    assert shared is not None
    try:
        with factory.server_client(Settings(vector_store={"backend": "server", "url": URL})) as client:
            assert client is shared
        shared.create_collection("c", vectors_config=models.VectorParams(size=8, distance=models.Distance.COSINE))
        rng = np.random.default_rng(7)
        vectors = rng.normal(size=(2000, 8)).astype(np.float32)

        def write(lo: int) -> None:
            for i in range(lo, lo + 1000, 10):
                points = [models.PointStruct(id=j, vector=vectors[j].tolist()) for j in range(i, i + 10)]
                shared.upsert("c", points=points)

        writers = [threading.Thread(target=write, args=(lo,)) for lo in (0, 1000)]
        for t in writers:
            t.start()
        for t in writers:
            t.join()
        back = {p.id: np.asarray(p.vector) for p in shared.retrieve("c", ids=list(range(2000)), with_vectors=True)}
        assert len(back) == 2000
        unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
        assert all(np.allclose(back[j], unit[j], atol=1e-5) for j in range(2000))
    finally:
        assert factory.share_qdrant_client(URL, None) is None
        raw.close()
