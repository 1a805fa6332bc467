"""The ingress's query embedder: its own thread count, the batch embedders' left as configured."""

from __future__ import annotations

import numpy as np
import pydantic
import pytest

from memcore.factory import build_embedder
from memcore.settings import Settings
from serve_apps.ingress import build_query_embedder


def test_query_embedder_runs_one_thread_and_embeds_like_the_batch_embedder(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, embedder={"kind": "minilm-l3", "threads": 2})
    query = build_query_embedder(settings)
    batch = build_embedder(settings.embedder)
    assert query is not None
    assert query.threads == 1 and batch.threads == 2  # type: ignore[attr-defined]
    assert query._session.get_session_options().intra_op_num_threads == 1  # type: ignore[attr-defined]
    texts = ["What did Caroline research?", "When is the pottery class?"]
    np.testing.assert_allclose(query.embed_queries(texts), batch.embed_queries(texts), atol=1e-5)


def test_query_embedder_threads_follow_the_setting(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path, embedder={"kind": "minilm-l3"}, http={"query_embedder_threads": 3})
    query = build_query_embedder(settings)
    assert query is not None and query.threads == 3  # type: ignore[attr-defined]


def test_no_query_embedder_when_shards_embed_queries(tmp_path) -> None:
    assert build_query_embedder(Settings(data_dir=tmp_path, http={"embed_queries_in_ingress": False})) is None


def test_query_embedder_threads_must_be_positive(tmp_path) -> None:
    with pytest.raises(pydantic.ValidationError, match="query_embedder_threads"):
        Settings(data_dir=tmp_path, http={"query_embedder_threads": 0})
