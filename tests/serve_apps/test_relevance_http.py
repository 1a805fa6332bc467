"""A hit's relevance over real HTTP (the FastAPI app under uvicorn on 127.0.0.1, LocalShardBackend): on its
scale for every hit, ``similarity_threshold`` filtering hybrid search, ``min_relevance`` of preload and of the
``memory_search`` tool, and a clear 422 for a value off the scale."""

from __future__ import annotations

import itertools

import httpx

from memcore.relevance import MAX_RELEVANCE, MIN_RELEVANCE

_users = itertools.count()
FACTS = ["Hana adopted a cat named Miso", "Hana's cat Miso likes tuna", "Hana works as a nurse in Porto",
         "Hana drinks green tea", "Hana plays the cello on Sundays"]


def _user(client: httpx.Client) -> str:
    base = f"/v1/apps/app/users/rel{next(_users)}"
    for text in FACTS:
        assert client.post(f"{base}/memories", json={"text": text}).status_code == 201
    return base


def _hits(client: httpx.Client, base: str, **body: object) -> list[dict[str, object]]:
    r = client.post(f"{base}/memories/search", json={"max_results": 10, **body})
    assert r.status_code == 200, r.text
    return list(r.json()["hits"])


def test_every_hit_carries_relevance_on_its_scale(client: httpx.Client) -> None:
    base = _user(client)
    for body in ({"query": "cat Miso"}, {"query": "cat Miso", "dense_weight": 0.0},
                 {"query": "cat Miso", "hybrid": False, "similarity_threshold": -1.0}):
        hits = _hits(client, base, **body)
        assert hits
        for h in hits:
            rel = h["relevance"]
            assert isinstance(rel, float) and MIN_RELEVANCE <= rel <= MAX_RELEVANCE
            assert isinstance(h["score"], float)
    spec = client.get("/openapi.json").json()["components"]["schemas"]["Hit"]
    assert "relevance" in spec["required"] and "cosine" in spec["properties"]["relevance"]["description"]


def test_similarity_threshold_filters_hybrid_search(client: httpx.Client) -> None:
    base = _user(client)
    every = _hits(client, base, query="Does Hana's cat Miso like tuna?")
    assert len(every) >= 3
    floor = (float(every[0]["relevance"]) + min(float(h["relevance"]) for h in every)) / 2  # type: ignore[arg-type]
    kept = _hits(client, base, query="Does Hana's cat Miso like tuna?", similarity_threshold=floor)
    assert kept and len(kept) < len(every)
    assert [h["entry"]["id"] for h in kept] == [  # type: ignore[index]
        h["entry"]["id"] for h in every if float(h["relevance"]) >= floor]  # type: ignore[arg-type,index]
    r = client.post(f"{base}/memories/search", json={"query": "cat", "similarity_threshold": 2})
    assert r.status_code == 422 and r.json()["field"] == "similarity_threshold"


def test_preload_floor_injects_nothing_for_an_off_topic_message(client: httpx.Client) -> None:
    base = _user(client)
    plain = client.post(f"{base}/preload", json={"budget": 10, "message": "quantum chromodynamics lecture"}).json()
    assert plain["strategy"] == "all" and len(plain["entries"]) == len(FACTS)
    off = client.post(f"{base}/preload", json={"budget": 10, "message": "quantum chromodynamics lecture",
                                               "min_relevance": 0.2}).json()
    assert (off["strategy"], off["entries"], off["text"]) == ("none", [], "")
    on = client.post(f"{base}/preload", json={"budget": 10, "message": "what does my cat Miso like",
                                              "min_relevance": 0.2}).json()
    assert on["strategy"] == "search" and on["entries"] and "Miso" in on["text"]
    r = client.post(f"{base}/preload", json={"budget": 10, "message": "cat", "min_relevance": "high"})
    assert r.status_code == 422 and r.json()["field"] == "min_relevance"


def test_memory_search_tool_min_relevance(client: httpx.Client) -> None:
    base = _user(client)
    args = {"query": "cat Miso tuna"}
    every = client.post(f"{base}/tools/memory_search", json={"arguments": args}).json()["results"]
    assert every and all(MIN_RELEVANCE <= r["relevance"] <= MAX_RELEVANCE for r in every)
    top = every[0]["relevance"] - 1e-6
    kept = client.post(f"{base}/tools/memory_search", json={"arguments": {**args, "min_relevance": top}}).json()
    assert [r["memory_id"] for r in kept["results"]] == [r["memory_id"] for r in every if r["relevance"] >= top]
    r = client.post(f"{base}/tools/memory_search", json={"arguments": {**args, "min_relevance": 1.5}})
    assert r.status_code == 422 and r.json()["field"] == "arguments.min_relevance"
