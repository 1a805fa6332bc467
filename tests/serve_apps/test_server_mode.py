"""Server mode end to end: ``vector_store.backend = server``, the real FastAPI app over real HTTP on
127.0.0.1, every shard on ONE shared collection, compared with the embedded mode (Qdrant Edge per shard).

No Qdrant server binary exists on the development machines, so the "server" is qdrant-client's
in-process engine (``QdrantClient(":memory:")``): the same qdrant-client API calls the adapter makes
against a real server, shared by both shards of a ``LocalShardBackend`` through
:func:`memcore.factory.share_qdrant_client`. What this cannot show: the server's own behaviour
(HNSW, payload indexes actually used, sharding and replication, durability); the local engine
ignores payload indexes, so the test checks the adapter *requests* them.

The same scenario (add, search with every option, update with id rotation, soft and hard delete,
clear, reactivation, preload, tools, export) runs against both modes and must give the same ids and
the same ranking. Then: export/import across modes (byte-identical), a shard's keyword index rebuilt
from the shared collection, and a re-extraction generation switch behind the collection alias.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import pytest
from qdrant_client import QdrantClient, models

from actors.shard import ShardCore
from memcore import factory
from memcore.errors import StoreError
from memcore.ids import memory_id, point_id, shard_of
from memcore.layout import ShardLayout
from memcore.model import Entry, Memory, UserKey
from memcore.settings import EmbedderSettings, Settings
from memcore.stores.qdrant import alias_target
from tests.serve_apps.conftest import Served, make_settings, serve_local

URL = "http://qdrant.invalid:6333"  # never contacted: the shared in-process client answers for it
APP = "demo"
USERS = ("alice", "bob", "carol")  # shards 1, 1, 0 of 2
T0 = datetime(2024, 1, 1, tzinfo=UTC)
SESSION = [("user", "I moved to Porto last spring"), ("assistant", "Porto is lovely"),
           ("user", "My sister Ines visits every June"), ("assistant", "Noted")]


class RecordingClient(QdrantClient):
    """The in-process engine, recording the payload indexes the adapter asks for (it ignores them)."""

    def __init__(self) -> None:
        super().__init__(":memory:")
        self.indexes: dict[tuple[str, str], Any] = {}
        self.layouts: dict[str, dict[str, Any]] = {}

    def create_payload_index(self, collection_name: str, field_name: str, field_schema: Any = None,
                             **kwargs: Any) -> Any:
        self.indexes[(collection_name, field_name)] = field_schema
        return super().create_payload_index(collection_name, field_name, field_schema=field_schema, **kwargs)

    def create_collection(self, collection_name: str, *args: Any, **kwargs: Any) -> bool:
        self.layouts[collection_name] = {k: v for k, v in kwargs.items() if k != "vectors_config"}
        return super().create_collection(collection_name, *args, **kwargs)


def server_settings(data_dir: Path, collection: str = "memcluster") -> Settings:
    return make_settings(data_dir, embedder={"kind": "minilm-l3"},
                         vector_store={"backend": "server", "url": URL, "collection": collection})


@pytest.fixture(scope="module")
def embedder() -> Any:
    """The default packaged embedder: the hashing test double scores unrelated texts exactly 0.0, and the two
    engines order tied dense hits differently (so fused rankings of ties would differ)."""
    return factory.build_embedder(EmbedderSettings())


@pytest.fixture(scope="module")
def qdrant() -> Iterator[RecordingClient]:
    client = RecordingClient()
    # the stores' calls take turns (the in-process engine is not thread-safe); the test's own calls join them
    yield cast(RecordingClient, factory.share_qdrant_client(URL, client))
    factory.share_qdrant_client(URL, None)
    client.close()


@pytest.fixture(scope="module")
def deployments(tmp_path_factory: pytest.TempPathFactory, embedder: Any,
                qdrant: RecordingClient) -> Iterator[dict[str, Served]]:
    edge_dir, server_dir = tmp_path_factory.mktemp("edge"), tmp_path_factory.mktemp("server")
    edge_settings = make_settings(edge_dir, embedder={"kind": "minilm-l3"})
    with serve_local(edge_dir, embedder, settings=edge_settings) as edge, \
            serve_local(server_dir, embedder, settings=server_settings(server_dir)) as server:
        yield {"edge": edge, "server": server}


def ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def ranking(hits: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(h["entry"]["id"], h["score"]) for h in hits]


SEARCHES: list[dict[str, Any]] = [
    {"query": "coffee in the morning"},
    {"query": "trip to Lisbon with Bob", "kind": "episode"},
    {"query": "meetings", "hybrid": False, "similarity_threshold": 0.0},
    {"query": "trip", "time_from": "2024-03-01T00:00:00Z", "time_to": "2024-06-30T00:00:00Z",
     "order_by_event_time": True},
    {"query": "bike", "max_results": 3, "deduplicate": False},
    {"query": "garden", "kind": "episode", "kind_fallback": True},
    {"query": "tea", "hybrid": True, "rrf_k": 10, "max_results": 50},
]


def scenario(c: httpx.Client) -> dict[str, Any]:
    """Every user-visible operation; returns what a client sees, without timestamps."""
    seen: dict[str, Any] = {}
    ids: dict[str, list[str]] = {}
    for u in USERS:
        base = f"/v1/apps/{APP}/users/{u}/memories"
        ids[u] = [ok(c.post(base, json=body), 201)["id"] for body in [
            {"text": f"{u} drinks black coffee in the morning", "topics": ["drinks"]},
            {"text": f"{u} prefers green tea after lunch", "topics": ["drinks", "tea"]},
            {"text": f"{u} never takes meetings before 10am", "topics": ["calendar"]},
            {"text": f"{u} rides a red bike to work"},
            {"text": f"{u} rides a red bike to work every day"},
            {"text": f"{u} went on a trip to Lisbon with Bob", "kind": "episode",
             "event_time": "2024-03-02T10:00:00+00:00", "participants": ["Bob"], "location": "Lisbon"},
            {"text": f"{u} planted tomatoes in the garden", "kind": "episode",
             "event_time": "2024-05-10T08:30:00+00:00"},
            {"text": f"{u} booked a trip to Kyoto", "kind": "episode", "event_time": "2024-09-01T00:00:00+00:00"},
            {"text": f"{u} plays chess on Sundays", "topics": ["games"]},
            {"text": f"{u} is allergic to peanuts", "source": "assistant", "provenance": ["s1:3"]},
        ]]
    ok(c.post("/v1/apps/other/users/alice/memories", json={"text": "alice drinks coffee in another app"}), 201)
    seen["ids"] = ids
    seen["search"] = [[ranking(ok(c.post(f"/v1/apps/{APP}/users/{u}/memories/search", json=q))["hits"])
                       for q in SEARCHES] for u in USERS]
    # update: a content change rotates the id; the old id is gone; rotating onto an active id is 409
    base = f"/v1/apps/{APP}/users/alice/memories"
    rotated = ok(c.patch(f"{base}/{ids['alice'][8]}", json={"text": "alice plays chess on Saturdays"}))
    seen["rotated"] = rotated["id"]
    seen["old_after_rotation"] = c.get(f"{base}/{ids['alice'][8]}").status_code
    seen["conflict"] = c.patch(f"{base}/{rotated['id']}", json={"text": "alice rides a red bike to work"}).status_code
    same = ok(c.patch(f"{base}/{ids['alice'][0]}", json={"text": "alice drinks black coffee in the morning",
                                                          "topics": ["coffee"]}))
    seen["topics_only_update"] = (same["id"], same["topics"])
    # deletes: soft (reactivated by a re-add), hard; clear
    ok(c.delete(f"{base}/{ids['alice'][3]}"), 204)
    ok(c.delete(f"{base}/{ids['alice'][9]}", params={"hard": "true"}), 204)
    seen["deleted"] = [c.get(f"{base}/{ids['alice'][i]}").status_code for i in (3, 9)]
    seen["reactivated"] = ok(c.post(base, json={"text": "alice rides a red bike to work"}), 201)["id"]
    ok(c.delete(f"/v1/apps/{APP}/users/carol/memories"), 204)
    seen["carol_after_clear"] = ok(c.get(f"/v1/apps/{APP}/users/carol/memories"))["entries"]
    seen["list"] = {u: [e["id"] for e in ok(c.get(f"/v1/apps/{APP}/users/{u}/memories?limit=100"))["entries"]]
                    for u in USERS}
    seen["search_after"] = [ranking(ok(c.post(f"/v1/apps/{APP}/users/alice/memories/search", json=q))["hits"])
                            for q in SEARCHES]
    seen["preload"] = [
        (p["strategy"], [e["id"] for e in p["entries"]], p["text"])
        for p in (ok(c.post(f"/v1/apps/{APP}/users/{u}/preload", json={"budget": b, "message": m}))
                  for u, b, m in [("alice", 3, "coffee or tea?"), ("bob", -1, ""), ("bob", 20, "x"),
                                  ("carol", 5, "anything")])
    ]
    tool = ok(c.post(f"/v1/apps/{APP}/users/bob/tools/memory_search", json={"arguments": {"query": "chess"}}))
    seen["tool_search"] = [m["memory_id"] for m in tool["results"]]
    seen["isolation"] = ok(c.post("/v1/apps/other/users/bob/memories/search", json={"query": "coffee"}))["hits"]
    return seen


@pytest.fixture(scope="module")
def observed(deployments: dict[str, Served]) -> dict[str, dict[str, Any]]:
    out = {}
    for mode, served in deployments.items():
        with served.client() as c:
            out[mode] = scenario(c)
    return out


def _without_scores(x: Any) -> Any:
    if isinstance(x, list):
        if x and isinstance(x[0], tuple) and len(x[0]) == 2 and isinstance(x[0][1], float):
            return [i for i, _ in x]
        return [_without_scores(v) for v in x]
    if isinstance(x, dict):
        return {k: _without_scores(v) for k, v in x.items()}
    return x


def test_same_ids_and_same_ranking_as_embedded_mode(observed: dict[str, dict[str, Any]]) -> None:
    edge, server = observed["edge"], observed["server"]
    assert _without_scores(server) == _without_scores(edge)  # same ids, same order, everywhere
    for e_user, s_user in zip(edge["search"], server["search"], strict=True):
        for e_hits, s_hits in zip(e_user, s_user, strict=True):
            assert [s for _, s in s_hits] == pytest.approx([s for _, s in e_hits], abs=1e-5)
    # the scenario did what it says (so "equal" is not "equally empty")
    assert all(len(v) == 10 for v in edge["ids"].values())
    assert all(any(hits) for hits in edge["search"][0])
    assert edge["old_after_rotation"] == 404 and edge["conflict"] == 409 and edge["deleted"] == [404, 404]
    assert edge["reactivated"] == edge["ids"]["alice"][3] and edge["carol_after_clear"] == []
    assert [p[0] for p in edge["preload"]] == ["search", "all", "all", "all"]
    assert edge["isolation"] == []


def test_one_shared_collection_with_payload_indexes(deployments: dict[str, Served], observed: Any,
                                                     qdrant: RecordingClient) -> None:
    server = deployments["server"]
    assert server.settings is not None
    ready = httpx.get(f"{server.url}/readyz").json()
    active = sum(s["entries"] for s in ready["shards"])
    assert active == qdrant.count("memcluster", count_filter=models.Filter(must=[
        models.FieldCondition(key="deleted", match=models.MatchValue(value=False))]), exact=True).count
    assert all(s["entries"] > 0 for s in ready["shards"])  # both shards serve users of the one collection
    for shard in range(2):  # the shards hold only their keyword index (and archive), no vectors
        d = ShardLayout(server.settings, shard).root
        assert (d / "keywords").is_dir() and not (d / "vectors").exists()
    edge = deployments["edge"]
    assert edge.settings is not None and ShardLayout(edge.settings, 0).vectors_dir().is_dir()
    # the local engine ignores payload indexes (payload_schema stays empty), so check what was requested
    requested = {f: s for (c, f), s in qdrant.indexes.items() if c == "memcluster"}
    keyword = models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, enable_hnsw=False)
    assert requested == {  # per-user HNSW graphs only (Qdrant's multitenancy guidance)
        "app": keyword,
        "user": models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
        "kind": keyword,
        "event_ts": models.FloatIndexParams(type=models.FloatIndexType.FLOAT, enable_hnsw=False),
        "deleted": models.BoolIndexParams(type=models.BoolIndexType.BOOL, enable_hnsw=False),
        "topics": keyword,
    }


def test_sharding_and_replication_from_settings(tmp_path: Path, embedder: Any, qdrant: RecordingClient) -> None:
    """``vector_store.shard_number`` / ``replication_factor`` / ``write_consistency_factor`` shape the
    collection memcluster creates (the in-process engine accepts and ignores them; a server applies them)."""
    layout = {"shard_number": 6, "replication_factor": 2, "write_consistency_factor": 2}
    settings = make_settings(tmp_path, embedder={"kind": "minilm-l3"}, vector_store={
        "backend": "server", "url": URL, "collection": "replicated", **layout})
    store = factory.build_vector_store(ShardLayout(settings, 0), embedder.dim)
    tenant_graphs = models.HnswConfigDiff(m=0, payload_m=16)  # no global graph: every search is one user's
    try:
        assert qdrant.layouts["replicated"] == {**layout, "hnsw_config": tenant_graphs}
    finally:
        store.close()
    plain = factory.build_vector_store(ShardLayout(server_settings(tmp_path / "plain", "plain"), 0), embedder.dim)
    plain.close()
    assert qdrant.layouts["plain"] == {"hnsw_config": tenant_graphs}  # sharding unset: the server's defaults
    dense = make_settings(tmp_path / "dense", embedder={"kind": "minilm-l3"}, vector_store={
        "backend": "server", "url": URL, "collection": "dense", "hnsw_m": 32, "hnsw_payload_m": 0})
    factory.build_vector_store(ShardLayout(dense, 0), embedder.dim).close()
    assert qdrant.layouts["dense"] == {"hnsw_config": models.HnswConfigDiff(m=32, payload_m=0)}


def test_an_operator_made_collection_is_kept_and_indexed(tmp_path: Path, embedder: Any,
                                                         qdrant: RecordingClient) -> None:
    """Sharding/replication are chosen by creating the collection first (docs/deployment.md, section 7)."""
    vectors = models.VectorParams(size=embedder.dim, distance=models.Distance.COSINE)
    qdrant.create_collection("premade", vectors_config=vectors, shard_number=6, replication_factor=2)
    carol = UserKey(app=APP, user="carol")
    mem = Memory(text="carol keeps a premade note")
    note = Entry(id=memory_id(carol, mem), app=APP, user="carol", created_at=T0, updated_at=T0, **mem.model_dump())
    qdrant.upsert("premade", points=[models.PointStruct(
        id=point_id(note.id), vector=embedder.embed_passages([note.text])[0].tolist(),
        payload=note.to_payload())])
    core = ShardCore(server_settings(tmp_path, "premade"), shard_of(carol, 2), embedder, start_workers=False)
    try:
        assert core.rebuilt == 1 and core.read(carol) == [note]  # found, not recreated
        assert core.search(carol, {"query": "premade note"})[0].entry.id == note.id
        indexed = {f for (c, f) in qdrant.indexes if c == "premade"}
        assert indexed == {"app", "user", "kind", "event_ts", "deleted", "topics"}
    finally:
        core.close()
    with pytest.raises(StoreError):  # a dimension mismatch is refused, not silently recreated
        ShardCore(server_settings(tmp_path / "d64", "premade"), 0, _Dim64(), start_workers=False)


class _Dim64:
    name, dim = "dim64", 64

    def embed_passages(self, texts: Any) -> Any:
        raise AssertionError("unused")

    embed_queries = embed_passages


def test_export_import_round_trip_across_modes(deployments: dict[str, Served], observed: Any, tmp_path: Path,
                                               embedder: Any) -> None:
    exports = {}
    for mode, served in deployments.items():
        with served.client() as c:
            r = c.get(f"/v1/apps/{APP}/export")
            assert r.status_code == 200
            exports[mode] = r.content
    assert _drop_times(exports["server"]) == _drop_times(exports["edge"])  # same entries, tombstones and all
    # the embedded export, imported into a fresh server-mode deployment (its own collection) and a fresh
    # embedded one: the same bytes back from both, and the two search alike. (Not against the original
    # deployment: its keyword index still counts the deleted and replaced entries in BM25's statistics until
    # Tantivy merges them away, which under load can take longer than any wait here.)
    restored_edge = make_settings(tmp_path / "restored-edge", embedder={"kind": "minilm-l3"})
    with serve_local(tmp_path / "restored", embedder, settings=server_settings(tmp_path / "restored",
                                                                              collection="restored")) as restored, \
            serve_local(tmp_path / "restored-edge", embedder, settings=restored_edge) as again_edge, \
            restored.client() as c, again_edge.client() as e:
        for client in (c, e):
            report = ok(client.post(f"/v1/apps/{APP}/import", content=exports["edge"]))
            assert report["entries"] == exports["edge"].count(b"\n")
            assert client.get(f"/v1/apps/{APP}/export").content == exports["edge"]
        # both settle in the background (keyword commits every keywords.commit_interval_s, the maintenance
        # thread's passes): under load, read both again until they agree, for at most 60 s
        deadline = time.monotonic() + 60
        while True:
            expected = [[ranking(ok(e.post(f"/v1/apps/{APP}/users/{u}/memories/search", json=q))["hits"])
                         for q in SEARCHES] for u in ("alice", "bob")]
            again = [[ranking(ok(c.post(f"/v1/apps/{APP}/users/{u}/memories/search", json=q))["hits"])
                      for q in SEARCHES] for u in ("alice", "bob")]
            if _without_scores(again) == _without_scores(expected) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    assert _without_scores(again) == _without_scores(expected)
    assert all(any(hits for hits in per_user) for per_user in expected)  # the searches find something


def _drop_times(body: bytes) -> list[dict[str, Any]]:
    import json

    lines = [json.loads(line) for line in body.splitlines()]
    for e in lines:
        for k in ("created_at", "updated_at", "deleted_at"):
            e[k] = e[k] is not None
    return lines


def test_a_shard_rebuilds_its_keyword_index_from_the_shared_collection(
        deployments: dict[str, Served], observed: Any, embedder: Any) -> None:
    server = deployments["server"]
    settings, backend = server.settings, server.backend
    assert settings is not None
    shard = shard_of(UserKey(app=APP, user="alice"), settings.shards)
    with server.client() as c:
        before = [ranking(ok(c.post(f"/v1/apps/{APP}/users/alice/memories/search", json=q))["hits"]) for q in SEARCHES]
        backend.shards[shard].close()
        shutil.rmtree(ShardLayout(settings, shard).keywords_dir())  # a lost disk: the index is derived
        fresh = ShardCore(settings, shard, embedder)
        backend.shards[shard] = fresh
        status = fresh.status()
        # rebuilt from the shared collection, with only the users this shard owns
        assert fresh.rebuilt == status["entries"] == status["keyword_docs"] > 0
        total = sum(1 for _ in fresh.service.vectors.scroll(None, include_deleted=False))
        assert status["entries"] < total
        after = [ranking(ok(c.post(f"/v1/apps/{APP}/users/alice/memories/search", json=q))["hits"]) for q in SEARCHES]
    assert _without_scores(after) == _without_scores(before)
    assert [[s for _, s in h] for h in after] == [[pytest.approx(s, abs=1e-6) for _, s in h] for h in before]


def test_reextract_generation_switch_behind_the_collection_alias(
        tmp_path: Path, embedder: Any, qdrant: RecordingClient, monkeypatch: pytest.MonkeyPatch) -> None:
    """The job's shard steps (begin, replay, switch) run on each shard; the job's server steps (alias, drop)
    run as in :mod:`jobs.reextract`. Afterwards the alias names the generation, and a new cluster (no
    pointer files, no keyword indexes) serves it."""
    from actors.shard_client import SyncShardClient
    from jobs import reextract

    settings = server_settings(tmp_path / "gens", collection="gens")
    gina, carol = UserKey(app=APP, user="gina"), UserKey(app=APP, user="carol")
    assert shard_of(gina, 2) == shard_of(carol, 2) == 0
    events = [{"id": f"s1-{i}", "role": role, "content": text, "timestamp": f"2024-03-01T10:0{i}:00+00:00"}
              for i, (role, text) in enumerate(SESSION)]
    with serve_local(tmp_path / "gens", embedder, settings=settings) as served, served.client() as c:
        cores: list[ShardCore] = served.backend.shards
        cores[0].backfill(gina, [("s1", events)], [], None)  # the archive the replay reads
        for e in events:
            ok(c.post(f"/v1/apps/{APP}/users/gina/memories",
                      json={"text": f"{e['role']}: {e['content']}", "provenance": [e["id"]]}), 201)
        for u in ("carol", "alice"):
            ok(c.post(f"/v1/apps/{APP}/users/{u}/memories", json={"text": f"{u} keeps bees"}), 201)
        old_gina = {e["text"] for e in ok(c.get(f"/v1/apps/{APP}/users/gina/memories"))["entries"]}
        others = {u: ok(c.get(f"/v1/apps/{APP}/users/{u}/memories"))["entries"] for u in ("carol", "alice")}
        assert len(old_gina) == 4

        begun = [core.begin_generation(2, [APP], []) for core in cores]
        assert begun[0]["users"] == [[APP, "gina"]] and sum(b["copied"] for b in begun) == 2
        assert qdrant.collection_exists("gens_g2")
        assert cores[0].reextract_user(2, gina, {"granularity": "session"})["applied"] == 1
        for core in cores:
            assert core.switch_generation(2)["to"] == 2
        new_gina = {e["text"] for e in ok(c.get(f"/v1/apps/{APP}/users/gina/memories"))["entries"]}
        assert len(new_gina) == 1 and "Porto" in next(iter(new_gina))
        assert {u: ok(c.get(f"/v1/apps/{APP}/users/{u}/memories"))["entries"] for u in ("carol", "alice")} == others
        hit = ok(c.post(f"/v1/apps/{APP}/users/gina/memories/search", json={"query": "sister Ines"}))["hits"][0]
        assert hit["entry"]["provenance"] == ["s1/s1-0", "s1/s1-1", "s1/s1-2", "s1/s1-3"]

        # the job's alias step: generation 1 is the real collection "gens", so the name is not free yet
        with pytest.raises(StoreError):
            reextract._server_collection(settings, 2, "alias")
        # memctl reextract --drop-generation 1: shards drop theirs, the collection goes, the alias takes the name
        monkeypatch.setattr(reextract, "cluster_shards", lambda s: SyncShardClient(served.backend))
        reextract.run_drop(settings, 1, log=lambda _: None)
        assert alias_target(qdrant, "gens") == "gens_g2"
        assert qdrant.count("gens").count == qdrant.count("gens_g2").count  # the alias reads generation 2
        expected = ok(c.post(f"/v1/apps/{APP}/users/gina/memories/search", json={"query": "Porto"}))["hits"]

        # a new cluster: no pointer files, no keyword indexes; the shards follow the alias
        for k, core in enumerate(cores):
            core.close()
            for name in ("current", "keywords", "gen-0002"):
                path = ShardLayout(settings, k).root / name
                shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)
        assert factory.current_generation(ShardLayout(settings, 0)) == 2
        served.backend.shards = [ShardCore(settings, k, embedder) for k in range(2)]
        assert [s.generations.current for s in served.backend.shards] == [2, 2]
        assert served.backend.shards[0].rebuilt == 2  # gina's session entry + carol's; alice is on shard 1
        assert ok(c.post(f"/v1/apps/{APP}/users/gina/memories/search", json={"query": "Porto"}))["hits"] == expected
