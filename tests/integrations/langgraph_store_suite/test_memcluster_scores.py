"""The vendored ``test_scores`` (langgraph-checkpoint-sqlite) with a search prefix that names the user: its
only difference is the cross-user ``search(())``; the score itself is LangGraph's, the cosine of the query's
and the item's embedding, to 1e-3. The vectors are the service's (its ``CharacterEmbeddings`` draws a
character's projection when it first meets it, so a second instance would project differently)."""

from __future__ import annotations

import math

import pytest

from tests.integrations.langgraph_store_suite.embed_test_utils import CharacterEmbeddings
from tests.integrations.langgraph_store_suite.embedder import CharacterEmbedder
from tests.integrations.langgraph_store_suite.live import LiveStore


def _cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.mark.parametrize("query", ["aaa", "bbb", "ccc", "abcd", "poisson"])
async def test_scores_are_langgraphs_cosine(query: str, service_embedder: CharacterEmbedder) -> None:
    store = LiveStore(index={"dims": 500, "embed": CharacterEmbeddings(dims=500), "fields": ["key0"]})
    doc = {"key0": "aaa"}
    store.put(("test",), "doc", doc, index=["key0", "key1"])
    for results in (store.search(("test",), query=query), await store.asearch(("test",), query=query)):
        assert len(results) == 1
        expected = _cosine(service_embedder.vector(doc["key0"]), service_embedder.vector(query))
        assert results[0].score == pytest.approx(expected, abs=1e-3)
