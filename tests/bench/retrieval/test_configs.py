"""The retrieval benchmark's configurations (bench/retrieval/configs.py): memcore's SearchOptions, each setting
routed to the part it belongs to, the default exactly the engine's."""

from __future__ import annotations

import pytest

from bench.retrieval.configs import (
    BASE,
    CONFIGS,
    DEFAULT,
    EXTRA_CONFIGS,
    IDEAS,
    SESSION_SEARCH,
    index_keys,
    session_spec,
    variant,
)
from bench.retrieval.ingest import IndexSpec
from memcore.search_model import SearchOptions

BY_NAME = {c.name: c for c in CONFIGS + EXTRA_CONFIGS}


def test_the_default_configuration_is_the_engines_default_path() -> None:
    cfg = BY_NAME[DEFAULT]
    assert cfg is CONFIGS[0]
    assert cfg.options("when did Ann adopt a cat?") == SearchOptions(query="when did Ann adopt a cat?")
    assert (cfg.spec.granularity, cfg.spec.window, cfg.spec.pool) == ("window", 1, 100)
    described = cfg.describe()
    assert described["name"] == DEFAULT and described["rrf_k"] is None and "query" not in described


def test_settings_go_to_the_index_the_search_or_the_shaping() -> None:
    cfg = BY_NAME["tuned-window1-spans01-pool30"]
    assert (cfg.spec.granularity, cfg.spec.pool) == ("window", 30)
    assert (cfg.search.max_results, cfg.search.rrf_k, cfg.search.keyword_weight) == (30, 10, 2.0)
    assert (cfg.post.shape, cfg.post.after) == ("spans", 1)
    vector, bm25 = BY_NAME["vector-turn"].search, BY_NAME["bm25-turn"].search
    assert (vector.hybrid, vector.similarity_threshold, vector.rrf_k) == (False, -1.0, 60)  # on the seeds' base
    assert (bm25.hybrid, bm25.dense_weight, bm25.keyword_weight) == (True, 0.0, 1.0)
    assert BY_NAME["hybrid-turn-dedup"].search.deduplicate and not BASE.search.deduplicate
    with pytest.raises(ValueError, match="unknown settings"):
        variant("typo", "", rrf=10)


def test_every_idea_compares_named_configurations_and_sessions_add_their_index() -> None:
    names = set(BY_NAME)
    assert len(names) == len(CONFIGS) + len(EXTRA_CONFIGS)
    assert all(a in names and b in names for _, a, b in IDEAS)
    sessions = BY_NAME["tuned-window1-sessions"]
    assert index_keys(sessions) == {sessions.spec, session_spec(sessions.spec)}
    assert session_spec(IndexSpec(granularity="window", window=1, pool=30)) == IndexSpec(granularity="session")
    assert (SESSION_SEARCH.dense_weight, SESSION_SEARCH.max_results) == (0.0, 30)
