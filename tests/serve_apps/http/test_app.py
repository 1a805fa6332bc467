"""The FastAPI app over real HTTP (uvicorn in a thread, httpx), backed by LocalShardBackend."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import httpx
import pytest

from memcore.errors import ConflictError, NotFoundError, PermissionDeniedError, StoreError
from memcore.settings import Settings
from serve_apps.http.errors import response_for

_users = itertools.count()


class Served(Protocol):
    """What the fixtures of ``conftest.py`` yield (not imported: conftest is pytest's)."""

    url: str
    settings: Settings | None

    def client(self, **kwargs: Any) -> httpx.Client: ...


def _settings(served: Served) -> Settings:
    assert served.settings is not None
    return served.settings


def user_path(app: str = "app", user: str | None = None) -> str:
    return f"/v1/apps/{app}/users/{user or f'u{next(_users)}'}"


def error_of(r: httpx.Response, status: int, error: str, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error", "field", "message"}, body
    assert body["error"] == error, body
    if field is not None:
        assert body["field"] == field, body
    assert "Traceback" not in r.text
    return dict(body)


def add(client: httpx.Client, base: str, text: str, **fields: Any) -> dict[str, Any]:
    r = client.post(f"{base}/memories", json={"text": text, **fields})
    assert r.status_code == 201, r.text
    return dict(r.json())


# ------------------------------------------------------------------ health, openapi
def test_healthz_and_readyz(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    r = client.get("/readyz")
    assert r.status_code == 200
    body = r.json()
    assert body["status"] == "ready"
    assert sorted(s["shard"] for s in body["shards"]) == [0, 1]


def test_not_attached_is_503(make_server: Callable[..., Served]) -> None:
    served = make_server(attach_backend=False)
    with served.client() as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/readyz")
        error_of(r, 503, "StoreError")
        assert r.headers["Retry-After"] == "1"
        error_of(c.get(f"{user_path()}/memories"), 503, "StoreError")
        error_of(c.get("/v1/apps/app/tools"), 503, "StoreError")


class _FailingBackend:
    def __init__(self, settings: Settings, exc: BaseException) -> None:
        self.settings = settings
        self.exc = exc

    async def call(self, key: Any, method: str, *args: Any) -> Any:
        raise self.exc

    async def status(self) -> list[dict[str, Any]]:
        raise self.exc


def test_readyz_503_when_a_shard_fails(make_server: Callable[..., Served], tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=2)
    served = make_server(backend=_FailingBackend(settings, ConnectionError("shard 1 unreachable")), settings=settings)
    with served.client() as c:
        error_of(c.get("/readyz"), 503, "StoreError")
        assert c.get("/healthz").status_code == 200


def test_openapi_lists_every_route(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    paths = {p: set(ops) for p, ops in spec["paths"].items() if not p.startswith("/mem0/")}  # mem0/test_openapi.py
    u = "/v1/apps/{app}/users/{user}"
    assert paths == {
        f"{u}/memories": {"post", "get", "delete"},
        f"{u}/memories/{{memory_id}}": {"get", "patch", "delete"},
        f"{u}/memories/search": {"post"},
        f"{u}/preload": {"post"},
        f"{u}/tools/{{name}}": {"post"},
        f"{u}/sessions/{{session}}/events": {"post"},
        f"{u}/sessions/recall": {"post"},
        f"{u}/sessions/{{session}}": {"delete"},
        f"{u}/sessions/{{session}}/events/{{event_id}}": {"delete"},
        "/v1/jobs/{job_id}": {"get"},
        "/v1/apps/{app}/tools": {"get"},
        "/v1/apps/{app}/export": {"get"},
        "/v1/apps/{app}/import": {"post"},
        u: {"delete"},
        f"{u}/graph/facts": {"post", "get"},
        f"{u}/graph/facts/invalidate": {"post"},
        f"{u}/graph/facts/{{fact_id}}": {"delete"},
        f"{u}/graph/timeline": {"get"},
        f"{u}/graph/neighbourhood": {"get"},
        f"{u}/graph/entities": {"put"},
        f"{u}/graph/entities/{{name}}": {"get"},
        f"{u}/diary": {"post", "get"},
        "/v1/apps/{app}/graph/export": {"get"},
        "/v1/apps/{app}/graph/import": {"post"},
        "/v1/admin/compact": {"post"},
        "/healthz": {"get"},
        "/readyz": {"get"},
    }
    assert spec["info"]["title"]
    schemas = spec["components"]["schemas"]
    for name in ("MemoryRequest", "EntryModel", "SearchRequest", "SearchResponse", "PreloadRequest",
                 "PreloadResponse", "ToolCallRequest", "ToolList", "ErrorBody", "IngestRequest", "JobModel",
                 "RecallRequest", "RecallResponse"):
        assert name in schemas
    assert schemas["MemoryRequest"]["properties"]["text"]["description"]
    post = spec["paths"][f"{u}/memories"]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/MemoryRequest")
    assert "201" in post["responses"] and "422" in post["responses"]
    assert client.get("/docs").status_code == 200


# ------------------------------------------------------------------ CRUD
def test_add_get_read(client: httpx.Client) -> None:
    base = user_path()
    r = client.post(f"{base}/memories", json={"text": "  Alice likes green tea  ", "topics": ["drinks"]})
    assert r.status_code == 201
    entry = r.json()
    assert entry["text"] == "Alice likes green tea"
    assert entry["topics"] == ["drinks"]
    assert entry["kind"] == "fact" and entry["app"] == "app" and entry["deleted_at"] is None
    assert int(r.headers["X-Memcluster-Seq"]) >= 1
    got = client.get(f"{base}/memories/{entry['id']}")
    assert got.status_code == 200 and got.json() == entry
    assert "X-Memcluster-Seq" not in got.headers
    second = add(client, base, "Alice went to Lisbon", kind="episode", event_time="2024-03-01T10:00:00+02:00",
                 participants=["Alice"], location="Lisbon")
    assert second["event_time"].startswith("2024-03-01T08:00:00")
    listed = client.get(f"{base}/memories").json()["entries"]
    assert [e["id"] for e in listed] == [second["id"], entry["id"]]
    assert [e["id"] for e in client.get(f"{base}/memories", params={"limit": 1}).json()["entries"]] == [second["id"]]
    # re-adding the same content is idempotent: same id, topics replaced
    again = add(client, base, "Alice likes green tea", topics=["tea"])
    assert again["id"] == entry["id"] and again["topics"] == ["tea"]


def test_read_limit_bounds(client: httpx.Client) -> None:
    base = user_path()
    error_of(client.get(f"{base}/memories", params={"limit": 0}), 422, "ValidationError", "limit")
    error_of(client.get(f"{base}/memories", params={"limit": 1001}), 422, "ValidationError", "limit")
    assert client.get(f"{base}/memories", params={"limit": 1000}).json() == {"entries": []}


def test_unknown_id_is_404(client: httpx.Client) -> None:
    base = user_path()
    error_of(client.get(f"{base}/memories/nope"), 404, "NotFoundError", "memory_id")
    error_of(client.patch(f"{base}/memories/nope", json={"text": "x"}), 404, "NotFoundError", "memory_id")
    error_of(client.delete(f"{base}/memories/nope"), 404, "NotFoundError", "memory_id")


def test_update_rotation_and_conflict(client: httpx.Client) -> None:
    base = user_path()
    a = add(client, base, "Bob owns a red bike")
    b = add(client, base, "Bob owns a blue car")
    # same content, new topics: same id
    r = client.patch(f"{base}/memories/{a['id']}", json={"text": "Bob owns a red bike", "topics": ["bike"]})
    assert r.status_code == 200 and r.json()["id"] == a["id"] and r.json()["topics"] == ["bike"]
    assert "X-Memcluster-Seq" in r.headers
    # new content: rotation onto a new id, the old one is gone
    r = client.patch(f"{base}/memories/{a['id']}", json={"text": "Bob owns a green bike"})
    assert r.status_code == 200
    rotated = r.json()
    assert rotated["id"] != a["id"] and rotated["text"] == "Bob owns a green bike"
    assert rotated["created_at"] == a["created_at"]
    error_of(client.get(f"{base}/memories/{a['id']}"), 404, "NotFoundError")
    assert client.get(f"{base}/memories/{rotated['id']}").status_code == 200
    # rotating onto an active id: conflict
    error_of(client.patch(f"{base}/memories/{rotated['id']}", json={"text": "Bob owns a blue car"}),
             409, "ConflictError", "memory_id")
    assert client.get(f"{base}/memories/{b['id']}").status_code == 200


def test_delete_and_clear(client: httpx.Client) -> None:
    base = user_path()
    a = add(client, base, "Carol plays chess")
    b = add(client, base, "Carol plays the violin")
    c = add(client, base, "Carol reads novels")
    r = client.delete(f"{base}/memories/{a['id']}")
    assert r.status_code == 204 and r.content == b"" and "X-Memcluster-Seq" in r.headers
    error_of(client.get(f"{base}/memories/{a['id']}"), 404, "NotFoundError")
    error_of(client.delete(f"{base}/memories/{a['id']}"), 404, "NotFoundError")
    assert client.delete(f"{base}/memories/{b['id']}", params={"hard": "true"}).status_code == 204
    error_of(client.get(f"{base}/memories/{b['id']}"), 404, "NotFoundError")
    error_of(client.delete(f"{base}/memories/{c['id']}", params={"hard": "maybe"}), 422, "ValidationError", "hard")
    r = client.delete(f"{base}/memories")
    assert r.status_code == 204 and "X-Memcluster-Seq" in r.headers
    assert client.get(f"{base}/memories").json() == {"entries": []}
    add(client, base, "Carol reads novels")  # a soft-deleted entry is reactivated by a re-add
    assert client.delete(f"{base}/memories", params={"hard": True}).status_code == 204
    assert client.get(f"{base}/memories").json() == {"entries": []}


def test_seq_increments_per_user(client: httpx.Client) -> None:
    first, second = user_path(), user_path()

    def seq(r: httpx.Response) -> int:
        assert r.status_code in (200, 201, 204), r.text
        return int(r.headers["X-Memcluster-Seq"])

    s1 = seq(client.post(f"{first}/memories", json={"text": "one"}))
    s2 = seq(client.post(f"{first}/memories", json={"text": "two"}))
    entry = client.post(f"{first}/memories", json={"text": "three"})
    s3 = seq(entry)
    s4 = seq(client.patch(f"{first}/memories/{entry.json()['id']}", json={"text": "three", "topics": ["t"]}))
    s5 = seq(client.delete(f"{first}/memories/{entry.json()['id']}"))
    s6 = seq(client.delete(f"{first}/memories"))
    assert [s1, s2, s3, s4, s5, s6] == [1, 2, 3, 4, 5, 6]
    assert seq(client.post(f"{second}/memories", json={"text": "one"})) == 1


def test_seq_never_repeats_after_the_user_is_erased(client: httpx.Client) -> None:
    base = user_path()
    before = [int(client.post(f"{base}/memories", json={"text": t}).headers["X-Memcluster-Seq"]) for t in "ab"]
    erased = client.delete(base)
    assert erased.status_code == 200 and erased.json()["entries"] == 2
    after = int(client.post(f"{base}/memories", json={"text": "c"}).headers["X-Memcluster-Seq"])
    assert before == [1, 2] and int(erased.headers["X-Memcluster-Seq"]) == 3 and after == 4


# ------------------------------------------------------------------ validation
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"text": "x", "kind": "opinion"}, "kind"),
        ({"text": ""}, "text"),
        ({"text": "   "}, "text"),
        ({}, "text"),
        ({"text": "x", "event_time": "last tuesday"}, "event_time"),
        ({"text": "x", "colour": "red"}, "colour"),
        ({"text": "x", "topics": "not-a-list"}, "topics"),
        ({"text": "x" * 9000}, "text"),
        ({"text": "x", "participants": ["p"] * 1 + [str(i) for i in range(64)]}, "participants"),
    ],
)
def test_memory_validation_names_the_field(client: httpx.Client, body: dict[str, Any], field: str) -> None:
    body_err = error_of(client.post(f"{user_path()}/memories", json=body), 422, "ValidationError", field)
    assert body_err["message"]


def test_search_validation(client: httpx.Client) -> None:
    base = user_path()
    error_of(client.post(f"{base}/memories/search", json={"query": "x", "max_results": 0}),
             422, "ValidationError", "max_results")
    error_of(client.post(f"{base}/memories/search", json={"query": 5}), 422, "ValidationError", "query")
    error_of(client.post(f"{base}/memories/search", json={"query": "x", "kind": "rumour"}),
             422, "ValidationError", "kind")
    err = error_of(client.post(f"{base}/memories/search",
                               json={"query": "x", "time_from": "2024-02-01", "time_to": "2024-01-01"}),
                   422, "ValidationError")
    assert "time_from" in err["message"]


def test_bad_app_and_user_ids(client: httpx.Client) -> None:
    error_of(client.get("/v1/apps/bad%01app/users/u/memories"), 422, "ValidationError", "app")
    error_of(client.post("/v1/apps/app/users/u%7F/memories", json={"text": "x"}), 422, "ValidationError", "user")
    error_of(client.get(f"/v1/apps/app/users/{'u' * 129}/memories"), 422, "ValidationError", "user")
    error_of(client.get("/v1/apps/%20app/users/u/memories"), 422, "ValidationError", "app")
    error_of(client.get("/v1/apps/bad%00app/tools"), 422, "ValidationError", "app")


def test_malformed_and_hostile_json(client: httpx.Client) -> None:
    base = user_path()
    headers = {"Content-Type": "application/json"}
    err = error_of(client.post(f"{base}/memories", content=b'{"text": "x",', headers=headers),
                   422, "ValidationError", "body")
    assert "JSON" in err["message"]
    error_of(client.post(f"{base}/memories", content=b"\xff\xfe not utf-8", headers=headers),
             422, "ValidationError", "body")
    deep = b"[" * 10_000 + b"]" * 10_000
    r = client.post(f"{base}/memories", content=deep, headers=headers)
    assert 400 <= r.status_code < 500, r.text
    error_of(r, 422, "ValidationError", "body")
    deep_obj = ('{"text": "x", "topics": ' + "[" * 10_000 + "]" * 10_000 + "}").encode()
    r = client.post(f"{base}/memories/search", content=deep_obj, headers=headers)
    assert 400 <= r.status_code < 500, r.text
    error_of(client.post(f"{base}/memories", json=["text"]), 422, "ValidationError", "body")
    error_of(client.post(f"{base}/memories", content=b"text=x", headers={"Content-Type": "text/plain"}),
             422, "ValidationError", "body")
    assert client.get(f"{base}/memories").json() == {"entries": []}  # nothing half-written


def test_oversized_bodies_are_413(server: Served, client: httpx.Client) -> None:
    base = user_path()
    limit = _settings(server).http.max_body_bytes
    big = json.dumps({"text": "x", "location": "y" * (limit + 10)}).encode()
    error_of(client.post(f"{base}/memories", content=big, headers={"Content-Type": "application/json"}),
             413, "PayloadTooLargeError", "body")

    def chunks() -> Iterator[bytes]:  # no Content-Length: the streamed size is what counts
        yield b'{"text": "x", "location": "'
        for _ in range(limit // 4096 + 2):
            yield b"y" * 4096
        yield b'"}'

    r = client.post(f"{base}/memories", content=chunks(), headers={"Content-Type": "application/json"})
    assert "content-length" not in r.request.headers
    error_of(r, 413, "PayloadTooLargeError", "body")
    # a body just under the limit is fine (and rejected by the model, not by size)
    near = json.dumps({"text": "x", "location": "y" * (limit - 100)}).encode()
    error_of(client.post(f"{base}/memories", content=near, headers={"Content-Type": "application/json"}),
             422, "ValidationError", "location")
    assert client.get(f"{base}/memories").json() == {"entries": []}


def test_unknown_route_and_method(client: httpx.Client) -> None:
    error_of(client.get("/v1/nothing-here"), 404, "NotFoundError")
    r = client.put(f"{user_path()}/memories")
    error_of(r, 405, "MethodNotAllowedError")
    assert "allow" in r.headers


# ------------------------------------------------------------------ search, preload
def test_search(client: httpx.Client) -> None:
    base = user_path()
    add(client, base, "Dana adopted a cat named Miso")
    add(client, base, "Dana works as a nurse in Porto", kind="episode", event_time="2023-05-01T00:00:00Z")
    add(client, base, "Dana's favourite food is ramen")
    r = client.post(f"{base}/memories/search", json={"query": "cat Miso"})
    assert r.status_code == 200
    hits = r.json()["hits"]
    assert hits and hits[0]["entry"]["text"] == "Dana adopted a cat named Miso"
    assert isinstance(hits[0]["score"], float)
    timing = dict(part.strip().split(";dur=") for part in r.headers["server-timing"].split(","))
    assert list(timing) == ["pre", "embed", "shard", "encode", "app"]
    assert all(float(v) >= 0 for v in timing.values())
    r = client.post(f"{base}/memories/search", json={"query": "nurse", "kind": "episode", "kind_fallback": False,
                                                     "max_results": 5, "deduplicate": True})
    assert [h["entry"]["kind"] for h in r.json()["hits"]] == ["episode"]
    r = client.post(f"{base}/memories/search", json={"query": "ramen", "hybrid": False,
                                                     "similarity_threshold": -1.0, "max_results": 2})
    assert len(r.json()["hits"]) == 2
    assert client.post(f"{base}/memories/search", json={"query": ""}).json() == {"hits": []}
    assert client.post(f"{base}/memories/search", json={}).json() == {"hits": []}
    other = user_path()
    assert client.post(f"{other}/memories/search", json={"query": "cat Miso"}).json() == {"hits": []}


@pytest.mark.parametrize("query", ['C++ AND (foo:bar "', "text:cat OR", "*?~^2 -", ")(", '"', "NOT", "a:b:c [x TO"])
def test_search_keyword_syntax_is_literal(client: httpx.Client, query: str) -> None:
    base = user_path()
    add(client, base, "C++ templates are hard, said Eve about foo")
    r = client.post(f"{base}/memories/search", json={"query": query})
    assert r.status_code == 200, r.text


def test_preload_strategies(client: httpx.Client) -> None:
    base = user_path()
    url = f"{base}/preload"
    r = client.post(url, json={})
    assert r.status_code == 200
    assert r.json() == {"entries": [], "text": "", "mode": "system", "strategy": "all", "cut": {}}
    for text in ("Finn likes hiking in the Alps", "Finn is allergic to peanuts", "Finn drives a Volvo",
                 "Finn's sister is called Greta"):
        add(client, base, text)
    assert client.post(url, json={"budget": 0}).json()["strategy"] == "off"
    everything = client.post(url, json={"budget": -1}).json()
    assert everything["strategy"] == "all" and len(everything["entries"]) == 4
    assert "<memories>" in everything["text"]
    assert client.post(url, json={"budget": 10}).json()["strategy"] == "all"
    searched = client.post(url, json={"budget": 2, "message": "what is Finn allergic to? peanuts"}).json()
    assert searched["strategy"] == "search" and len(searched["entries"]) <= 2
    assert any("peanuts" in e["text"] for e in searched["entries"])
    recent = client.post(url, json={"budget": 2, "message": ""}).json()
    assert recent["strategy"] == "recent" and len(recent["entries"]) == 2
    custom = client.post(url, json={"budget": -1, "mode": "user", "playbook": "MY PLAYBOOK"}).json()
    assert custom["mode"] == "user" and custom["text"].startswith("MY PLAYBOOK")
    error_of(client.post(url, json={"budget": -2}), 422, "ValidationError", "budget")
    error_of(client.post(url, json={"budget": 1001}), 422, "ValidationError", "budget")
    error_of(client.post(url, json={"mode": "assistant"}), 422, "ValidationError", "mode")
    error_of(client.post(url, json={"budget": 1, "extra": 1}), 422, "ValidationError", "extra")


# ------------------------------------------------------------------ tools
def test_tool_listing(client: httpx.Client) -> None:
    def names(mode: str | None) -> list[str]:
        r = client.get("/v1/apps/app/tools", params={"mode": mode} if mode else None)
        assert r.status_code == 200, r.text
        tools = r.json()["tools"]
        assert all(t["type"] == "function" and "parameters" in t["function"] for t in tools)
        return [t["function"]["name"] for t in tools]

    assert names(None) == ["memory_add", "memory_update", "memory_search", "memory_load"]
    assert names("agentic") == names(None)  # no extractor model: the app's mode is agentic
    error_of(client.get("/v1/apps/app/tools", params={"mode": "auto"}), 403, "PermissionDeniedError", "mode")
    error_of(client.get("/v1/apps/app/tools", params={"mode": "manual"}), 422, "ValidationError", "mode")


def test_tool_policy_from_settings(make_server: Callable[..., Served]) -> None:
    served = make_server(tools={"enabled": {"memory_clear": True, "memory_load": True}, "auto_exposed": ["memory_add"]},
                         memory={"apps": {"y": {"tool_mode": "auto"}}})
    with served.client() as c:
        agentic = [t["function"]["name"] for t in c.get("/v1/apps/x/tools").json()["tools"]]
        assert "memory_clear" in agentic
        auto = [t["function"]["name"] for t in c.get("/v1/apps/y/tools").json()["tools"]]
        assert auto == ["memory_add", "memory_search", "memory_load"]
        base = user_path("x")
        add(c, base, "to be cleared")
        r = c.post(f"{base}/tools/memory_clear", json={})
        assert r.status_code == 200 and r.json() == {"status": "ok", "cleared": 1}


def test_tool_execution(client: httpx.Client) -> None:
    base = user_path()
    r = client.post(f"{base}/tools/memory_add", json={"arguments": {"memory": "Gina speaks Portuguese",
                                                                    "topics": ["languages"]}})
    assert r.status_code == 200, r.text
    added = r.json()
    assert added["status"] == "ok" and added["memory"] == "Gina speaks Portuguese"
    assert client.get(f"{base}/memories/{added['memory_id']}").status_code == 200
    r = client.post(f"{base}/tools/memory_search", json={"arguments": {"query": "Portuguese"}})
    assert r.status_code == 200 and r.json()["count"] >= 1
    assert r.json()["results"][0]["memory_id"] == added["memory_id"]
    r = client.post(f"{base}/tools/memory_update",
                    json={"arguments": {"memory_id": added["memory_id"], "memory": "Gina speaks Spanish"}})
    assert r.status_code == 200 and r.json()["previous_id"] == added["memory_id"]
    loaded = client.post(f"{base}/tools/memory_load", json={"arguments": {"limit": 5}}).json()
    assert [x["memory"] for x in loaded["results"]] == ["Gina speaks Spanish"]
    # not exposed in the app's (agentic) mode; naming another mode changes nothing
    error_of(client.post(f"{base}/tools/memory_delete", json={"arguments": {"memory_id": "x"}}),
             403, "PermissionDeniedError", "name")
    error_of(client.post(f"{base}/tools/memory_clear", json={}), 403, "PermissionDeniedError")
    error_of(client.post(f"{base}/tools/memory_load", json={"mode": "auto"}), 403, "PermissionDeniedError", "mode")
    new_id = r.json()["memory_id"]
    error_of(client.post(f"{base}/tools/memory_delete", json={"arguments": {"memory_id": new_id}, "mode": "auto"}),
             403, "PermissionDeniedError", "mode")
    assert client.get(f"{base}/memories/{new_id}").status_code == 200
    # unknown tool, bad arguments, bad mode
    error_of(client.post(f"{base}/tools/memory_forget", json={}), 404, "NotFoundError", "name")
    error_of(client.post(f"{base}/tools/memory_add", json={"arguments": {"memory": ""}}),
             422, "ValidationError", "arguments.memory")
    error_of(client.post(f"{base}/tools/memory_add", json={"arguments": {"memory": "x", "colour": 1}}),
             422, "ValidationError", "arguments")
    error_of(client.post(f"{base}/tools/memory_add", json={"arguments": "memory"}), 422, "ValidationError",
             "arguments")
    error_of(client.post(f"{base}/tools/memory_add", json={"arguments": {}, "mode": "x"}), 422, "ValidationError",
             "mode")


# ------------------------------------------------------------------ auth
def _key(served: Served, app: str) -> str:
    return _settings(served).api_key_map()[app]


def _bearer(served: Served, app: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {_key(served, app)}"}


def test_auth_open_routes(auth_server: Served) -> None:
    with auth_server.client() as c:
        for path in ("/healthz", "/readyz", "/openapi.json", "/docs"):
            assert c.get(path).status_code == 200, path


def test_auth_missing_or_unknown_key_is_401(auth_server: Served) -> None:
    base = user_path("app-a")
    key = _key(auth_server, "app-a")
    with auth_server.client() as c:
        for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": f"Basic {key}"},
                        {"Authorization": "Bearer"}, {"Authorization": key},
                        {"Authorization": f"Bearer {key}x"}):
            r = c.post(f"{base}/memories", json={"text": "secret"}, headers=headers)
            error_of(r, 401, "AuthenticationError")
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert key not in r.text
        error_of(c.get("/v1/apps/app-a/tools"), 401, "AuthenticationError")
        # auth comes before body parsing: no hint about the body without a key
        error_of(c.post(f"{base}/memories", content=b"{", headers={"Content-Type": "application/json"}),
                 401, "AuthenticationError")
        r = c.get(f"{base}/memories", headers=_bearer(auth_server, "app-a"))
        assert r.status_code == 200 and r.json() == {"entries": []}


def test_auth_key_of_another_app_is_403(auth_server: Served) -> None:
    key_a, key_b = _bearer(auth_server, "app-a"), _bearer(auth_server, "app-b")
    with auth_server.client() as c:
        base_b = user_path("app-b")
        error_of(c.post(f"{base_b}/memories", json={"text": "x"}, headers=key_a), 403, "PermissionDeniedError", "app")
        error_of(c.get("/v1/apps/app-b/tools", headers=key_a), 403, "PermissionDeniedError")
        error_of(c.get(f"{user_path('app-c')}/memories", headers=key_a), 403, "PermissionDeniedError")
        assert c.post(f"{base_b}/memories", json={"text": "x"}, headers=key_b).status_code == 201
        assert c.get("/v1/apps/app-b/tools", headers=key_b).status_code == 200


def test_auth_user_scope_is_a_hard_filter(auth_server: Served) -> None:
    owner, intruder = user_path("app-a", "owner"), user_path("app-a", "intruder")
    with auth_server.client(headers=_bearer(auth_server, "app-a")) as c:
        entry = add(c, owner, "The owner's bank PIN hint is 'blue whale'")
        error_of(c.get(f"{intruder}/memories/{entry['id']}"), 404, "NotFoundError")
        error_of(c.patch(f"{intruder}/memories/{entry['id']}", json={"text": "hijacked"}), 404, "NotFoundError")
        error_of(c.delete(f"{intruder}/memories/{entry['id']}"), 404, "NotFoundError")
        assert c.post(f"{intruder}/memories/search", json={"query": "bank PIN blue whale"}).json() == {"hits": []}
        assert c.get(f"{intruder}/memories").json() == {"entries": []}
        assert c.get(f"{owner}/memories/{entry['id']}").status_code == 200
    with auth_server.client(headers=_bearer(auth_server, "app-b")) as c:  # same user id under another app
        error_of(c.get(f"{user_path('app-b', 'owner')}/memories/{entry['id']}"), 404, "NotFoundError")


def test_shared_key_grants_every_app_it_is_configured_for(make_server: Callable[..., Served]) -> None:
    served = make_server(api_keys={"one": "shared-key", "two": "shared-key", "three": "other-key"})
    with served.client(headers={"Authorization": "Bearer shared-key"}) as c:
        assert c.get("/v1/apps/one/tools").status_code == 200
        assert c.get("/v1/apps/two/tools").status_code == 200
        error_of(c.get("/v1/apps/three/tools"), 403, "PermissionDeniedError")


# ------------------------------------------------------------------ error mapping
class FakeRayTaskError(Exception):
    """Mimics ``ray.exceptions.RayTaskError``: keeps the original exception on ``.cause``."""

    def __init__(self, cause: BaseException) -> None:
        super().__init__(f"ray task failed: {cause!r}")
        self.cause = cause


def as_instanceof_cause(cause: BaseException, *, delegate: bool = False) -> BaseException:
    """Like ``RayTaskError.as_instanceof_cause`` (ray 2.x): a subclass of both whose ``__init__`` only
    stores the cause, with ``args == (cause,)``; ``delegate`` adds ray's ``__getattr__`` forwarding."""

    def __init__(self: Any, c: BaseException) -> None:
        self.cause = c
        self.args = (c,)

    body: dict[str, Any] = {"__init__": __init__}
    if delegate:
        body["__getattr__"] = lambda self, name: getattr(self.cause, name)
    cls = type(f"RayTaskError({type(cause).__name__})", (FakeRayTaskError, type(cause)), body)
    return cls(cause)  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("cause", "status", "field"),
    [
        (NotFoundError("memory 'x' not found", field="memory_id"), 404, "memory_id"),
        (ConflictError("would rotate", field="memory_id"), 409, "memory_id"),
        (PermissionDeniedError("tool disabled", field="name"), 403, "name"),
        (StoreError("qdrant down", field="store"), 503, "store"),
    ],
)
@pytest.mark.parametrize("delegate", [False, True])
def test_ray_task_error_maps_to_the_cause(cause: Exception, status: int, field: str, delegate: bool) -> None:
    wrapped = as_instanceof_cause(cause, delegate=delegate)
    assert isinstance(wrapped, type(cause)) and hasattr(wrapped, "message") == delegate
    r = response_for(wrapped)
    assert r.status_code == status
    body = json.loads(bytes(r.body))
    assert body == {"error": type(cause).__name__, "field": field, "message": str(cause.args[0])}
    assert (r.headers.get("retry-after") == "1") == (status == 503)


def test_a_recursion_error_is_the_clients_422_not_a_503() -> None:
    r = response_for(RecursionError("maximum recursion depth exceeded"))
    assert r.status_code == 422 and "retry-after" not in r.headers
    assert json.loads(bytes(r.body)) == {"error": "ValidationError", "field": "body",
                                         "message": "the request is nested too deep"}
    assert response_for(RuntimeError("boom")).status_code == 503  # anything else stays a 503


def test_wrapped_errors_over_http(make_server: Callable[..., Served], tmp_path: Any) -> None:
    settings = Settings(data_dir=tmp_path, shards=1)
    cases = [
        (as_instanceof_cause(NotFoundError("gone", field="memory_id")), 404, "NotFoundError"),
        (FakeRayTaskError(RuntimeError("boom: /secret/path")), 503, "StoreError"),
        (RuntimeError("internal detail /secret/path"), 503, "StoreError"),
        (StoreError("tantivy failed", field="store"), 503, "StoreError"),
    ]
    for exc, status, name in cases:
        served = make_server(backend=_FailingBackend(settings, exc), settings=settings)
        with served.client() as c:
            r = c.get(f"{user_path()}/memories/abc")
            error_of(r, status, name)
            assert "/secret/path" not in r.text  # unexpected errors do not leak their details
            if status == 503:
                assert r.headers["Retry-After"] == "1"


def test_search_preload_and_tool_filter_by_topics(client: httpx.Client) -> None:
    base = user_path()
    for i in range(30):
        add(client, base, f"Gym log {i}: running running shoes running")
    run = add(client, base, "Ran a half marathon in running shoes", topics=["sport", "health"])
    shoes = add(client, base, "Bought running shoes in Porto", topics=["shopping"])
    url = f"{base}/memories/search"
    hits = client.post(url, json={"query": "running shoes", "topics": ["sport", "shopping"], "max_results": 2}).json()
    assert {h["entry"]["id"] for h in hits["hits"]} == {run["id"], shoes["id"]}
    both = client.post(url, json={"query": "running", "topics": ["sport", "health"], "topics_match": "all"}).json()
    assert [h["entry"]["id"] for h in both["hits"]] == [run["id"]]
    dense = client.post(url, json={"query": "running", "topics": ["shopping"], "hybrid": False,
                                   "similarity_threshold": -1.0}).json()
    assert [h["entry"]["id"] for h in dense["hits"]] == [shoes["id"]]
    error_of(client.post(url, json={"query": "x", "topics_match": "most"}), 422, "ValidationError", "topics_match")
    error_of(client.post(url, json={"query": "x", "topics": ["t" * 65]}), 422, "ValidationError")
    pre = client.post(f"{base}/preload", json={"budget": 1, "message": "running shoes", "topics": ["shopping"]})
    assert pre.status_code == 200
    assert [e["id"] for e in pre.json()["entries"]] == [shoes["id"]]
    allpre = client.post(f"{base}/preload", json={"budget": -1, "topics": ["sport", "shopping"]}).json()
    assert {e["id"] for e in allpre["entries"]} == {run["id"], shoes["id"]}
    error_of(client.post(f"{base}/preload", json={"topics_match": "most"}), 422, "ValidationError", "topics_match")
    tool = client.post(f"{base}/tools/memory_search", json={"arguments": {"query": "running shoes",
                                                                          "topics": ["sport"], "limit": 3}})
    assert tool.status_code == 200, tool.text
    assert [r["memory_id"] for r in tool.json()["results"]] == [run["id"]]
