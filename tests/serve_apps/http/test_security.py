"""Hostile input against the live HTTP server (uvicorn + LocalShardBackend, three apps with keys).

What is checked here and not in ``http/test_app.py``: every app-scoped route (read from the OpenAPI
schema, so new routes are covered) refuses another app's key; other users' entry ids are 404 for
hard deletes and the memory tools and leave the entry unchanged; a forged backup line cannot
overwrite another app's entry; every JSON route answers 413 over the body limit and 4xx to JSON
nested 100,000 deep; keyword-index syntax in memory texts and in every free-text field; unicode
edge cases (RTL override, zero-width joiners, lone surrogates, NUL, emoji and 4-byte app ids,
invalid UTF-8 in the path); path traversal in ids; header injection; constant-time key checks;
no key ever reaches a log line, the settings' repr or their JSON.
"""

from __future__ import annotations

import hmac
import inspect
import json
import logging
import re
import socket
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memcore.settings import HttpSettings, Settings
from serve_apps.http import access as http_access
from tests.serve_apps.conftest import Served, run_app, serve_local

KEYS = {"app-a": "sec-key-A-6f1d2c3b4a59687", "app-b": "sec-key-B-0a9b8c7d6e5f4a3",
        "app-😀": "sec-key-E-1122334455667788"}
A, B, E = "app-a", "app-b", "app-😀"
LIMIT = 256 * 1024
SYNTAX = ["title:x", "*", "AND(", '"', "text:secret OR app:app-b", "a:b:c [x TO", "NEAR(a b)", "\\", "+-^~2"]


def bearer(app: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {KEYS[app]}"}


@pytest.fixture(scope="module")
def sec(hashing_embedder: Any) -> Iterator[Served]:
    with tempfile.TemporaryDirectory() as tmp, \
            serve_local(Path(tmp), hashing_embedder, api_keys=KEYS, http=HttpSettings(max_body_bytes=LIMIT)) as s:
        yield s


@pytest.fixture
def ca(sec: Served) -> Iterator[httpx.Client]:
    with sec.client(headers=bearer(A)) as c:
        yield c


_n = iter(range(10**9))


def fresh(app: str = A) -> str:
    return f"/v1/apps/{app}/users/sec{next(_n)}"


def add(c: httpx.Client, base: str, text: str, **fields: Any) -> dict[str, Any]:
    r = c.post(f"{base}/memories", json={"text": text, **fields})
    assert r.status_code == 201, r.text
    return dict(r.json())


def is_4xx(r: httpx.Response) -> None:
    assert 400 <= r.status_code < 500, (r.status_code, r.text[:300])
    assert "Traceback" not in r.text


def json_routes(c: httpx.Client) -> list[tuple[str, str]]:
    """(method, path template) of every route with a JSON body, from the OpenAPI schema."""
    spec = c.get("/openapi.json").json()
    return [(m.upper(), p) for p, ops in spec["paths"].items() for m, op in ops.items()
            if "application/json" in op.get("requestBody", {}).get("content", {})]


def concrete(path: str, app: str, user: str = "u") -> str:
    return path.format(app=app, user=user, memory_id="m", name="memory_add", session="s", job_id="j", event_id="e",
                       fact_id="f")


# ------------------------------------------------------------------ keys
def test_keys_are_compared_in_constant_time_over_every_key(sec: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    source = inspect.getsource(http_access.granted_apps)
    assert "hmac.compare_digest" in source and "==" not in source
    loop = source[source.index("for app_name"):]
    assert not re.search(r"\b(break|return)\b", loop.split("if not granted")[0]), "no early exit"
    calls: list[tuple[int, int]] = []
    real = hmac.compare_digest

    def counting(a: Any, b: Any) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", counting)
    with sec.client() as c:
        for app, headers in ((A, bearer(A)), (A, bearer(E)), (A, {"Authorization": "Bearer x"}),
                             (B, {"Authorization": "Bearer " + KEYS[B] * 40})):
            calls.clear()
            c.get(f"/v1/apps/{app}/tools", headers=headers)
            # every configured key, each as a fixed-length digest: no early exit, no length leak
            assert len(calls) == len(KEYS) and set(calls) == {(32, 32)}, calls


def test_every_app_route_refuses_another_apps_key(sec: Served, ca: httpx.Client) -> None:
    spec = ca.get("/openapi.json").json()
    routes = [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops if "{app}" in p]
    assert ("GET", "/v1/apps/{app}/export") in routes and ("POST", "/v1/apps/{app}/import") in routes
    with sec.client() as anon:
        for method, path in routes:
            for app in (B, E, "app-c"):
                url = concrete(path, app)
                r = ca.request(method, url, json={"text": "forged", "query": "x", "events": []})
                assert r.status_code == 403 and r.json()["field"] == "app", (method, url, r.text)
                r = anon.request(method, url, json={})
                assert r.status_code == 401, (method, url, r.text)
    with sec.client(headers=bearer(B)) as cb:
        assert cb.get(f"/v1/apps/{B}/export").content == b""  # nothing reached app-b


def test_other_users_ids_are_404_and_leave_the_entry_alone(sec: Served, ca: httpx.Client) -> None:
    owner, intruder = fresh(), fresh()
    entry = add(ca, owner, "The owner's locker code is 4711", topics=["private"])
    eid = entry["id"]
    attempts = [
        ("DELETE", f"{intruder}/memories/{eid}?hard=true", None),
        ("PATCH", f"{intruder}/memories/{eid}", {"text": "The owner's locker code is 4711", "topics": ["x"]}),
        ("POST", f"{intruder}/tools/memory_update", {"arguments": {"memory_id": eid, "memory": "hijacked"}}),
    ]
    for method, url, body in attempts:
        r = ca.request(method, url, json=body)
        assert r.status_code == 404 and r.json()["field"] == "memory_id", (method, url, r.text)
    # the id as a query, or smuggled into search / preload / tool arguments, finds nothing of the owner's
    assert ca.post(f"{intruder}/memories/search", json={"query": eid}).json() == {"hits": []}
    for body in ({"query": "locker", "id": eid}, {"query": "locker", "memory_id": eid}):
        assert ca.post(f"{intruder}/memories/search", json=body).status_code == 422
    r = ca.post(f"{intruder}/tools/memory_search", json={"arguments": {"query": "locker code", "memory_id": eid}})
    assert r.status_code == 422 or r.json().get("count") == 0, r.text
    assert ca.post(f"{intruder}/preload", json={"budget": -1, "message": eid}).json()["entries"] == []
    # same user id under another app, with that app's key
    with sec.client(headers=bearer(B)) as cb:
        same_user_b = owner.replace(f"/apps/{A}/", f"/apps/{B}/")
        r = cb.post(f"{same_user_b}/tools/memory_update", json={"arguments": {"memory_id": eid, "memory": "x"}})
        assert r.status_code == 404
    assert ca.get(f"{owner}/memories/{eid}").json() == entry


def test_a_forged_backup_line_cannot_overwrite_another_scope(sec: Served, ca: httpx.Client) -> None:
    """Point ids derive from entry ids only, so a restore must not accept ids it did not derive."""
    with sec.client(headers=bearer(B)) as cb:
        victim = add(cb, fresh(B), "app-b's own memory")
        before = cb.get(f"/v1/apps/{B}/export").content
    forged = {**victim, "app": A, "text": "overwritten by app-a"}
    r = ca.post(f"/v1/apps/{A}/import", content=json.dumps(forged))
    assert r.status_code == 422 and r.json()["field"] == "lines.1", r.text
    same_app = {**victim, "app": A}  # identical content under app-a: the id names app-b's scope
    assert ca.post(f"/v1/apps/{A}/import", content=json.dumps(same_app)).status_code == 422
    with sec.client(headers=bearer(B)) as cb:
        assert cb.get(f"/v1/apps/{B}/export").content == before


# ------------------------------------------------------------------ bodies
def test_every_json_route_has_the_body_limit(ca: httpx.Client) -> None:
    big = json.dumps({"text": "x", "pad": "y" * (LIMIT + 1)}).encode()
    for method, path in json_routes(ca):
        url = concrete(path, A)
        r = ca.request(method, url, content=big, headers={"Content-Type": "application/json"})
        assert r.status_code == 413 and r.json()["error"] == "PayloadTooLargeError", (url, r.text)


def test_json_nested_100k_deep_is_4xx_everywhere(ca: httpx.Client) -> None:
    deep_list = "[" * 100_000 + "]" * 100_000
    deep_obj = '{"arguments": {"a": ' + "[" * 100_000 + "]" * 100_000 + "}}"
    assert len(deep_list) < LIMIT and len(deep_obj) < LIMIT
    base = fresh()
    for method, path in json_routes(ca):
        url = concrete(path, A, base.rsplit("/", 1)[1])
        for body in (deep_list, deep_obj):
            r = ca.request(method, url, content=body, headers={"Content-Type": "application/json"})
            is_4xx(r)
    r = ca.post(f"/v1/apps/{A}/import", content=deep_list)
    assert r.status_code == 422 and r.json()["field"] == "lines.1"
    assert ca.get(f"{base}/memories").json() == {"entries": []}


def test_deep_filters_and_huge_numbers_are_422_naming_the_field(ca: httpx.Client) -> None:
    """A client's bad input is a 422 naming its field, never a 503 "retry later": deep nesting in the
    ``metadata_filter`` query parameter (a RecursionError in the JSON parser), a 10,000-digit number
    (Python's int-from-text limit, a ValueError) in the filter, an import line or a JSON body."""
    from memcore.jsontext import MAX_JSON_DEPTH, MAX_NUMBER_CHARS

    base = fresh()
    add(ca, base, "a memory that must survive bad input", metadata={"n": 7})
    huge = "9" * 10_000
    for flt, text in (('{"a": ' + "[" * 1500 + "]" * 1500 + "}", "nested deeper"),
                      ("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1), "nested deeper"),
                      ('{"n": ' + huge + "}", f"longer than {MAX_NUMBER_CHARS}"),
                      ('{"n": 1e999}', "out of range"), ('{"n": NaN}', "not a JSON value"),
                      ("{", "malformed JSON")):
        r = ca.get(f"{base}/memories", params={"metadata_filter": flt})
        assert r.status_code == 422, (flt[:40], r.status_code, r.text[:300])
        assert r.json()["field"] == "metadata_filter" and text in r.json()["message"], r.json()
    assert ca.get(f"{base}/memories", params={"metadata_filter": '{"n": 7}'}).json()["entries"]
    line = json.dumps({"id": "x", "app": A, "user": "u", "text": "t"})[:-1] + ', "n": ' + huge + "}"
    r = ca.post(f"/v1/apps/{A}/import", content=line)
    assert r.status_code == 422 and r.json()["field"] == "lines.1", r.text[:300]
    assert f"longer than {MAX_NUMBER_CHARS}" in r.json()["message"]
    r = ca.post(f"{base}/memories", content='{"text": "x", "metadata": {"n": ' + huge + "}}",
                headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["field"] == "body" and "digits" in r.json()["message"], r.text
    r = ca.post(f"{base}/memories/search", content='{"query": "x", "max_results": ' + huge + "}",
                headers={"Content-Type": "application/json"})
    is_4xx(r)
    assert [e["text"] for e in ca.get(f"{base}/memories").json()["entries"]] == ["a memory that must survive bad input"]


# ------------------------------------------------------------------ keyword syntax
def test_keyword_syntax_in_texts_and_queries_is_literal(ca: httpx.Client) -> None:
    base = fresh()
    for i, s in enumerate(SYNTAX):
        add(ca, base, f"zebra{i} note with {s} inside")
    for i, s in enumerate(SYNTAX):
        for body in ({"query": s}, {"query": s, "hybrid": False}, {"query": f"zebra{i} {s}"}):
            r = ca.post(f"{base}/memories/search", json=body)
            assert r.status_code == 200, (s, r.text)
        hits = ca.post(f"{base}/memories/search", json={"query": f"zebra{i} {s}"}).json()["hits"]
        assert hits[0]["entry"]["text"] == f"zebra{i} note with {s} inside"
        r = ca.post(f"{base}/tools/memory_search", json={"arguments": {"query": s}})
        assert r.status_code == 200, r.text
        assert ca.post(f"{base}/preload", json={"budget": 2, "message": s}).status_code == 200
        assert ca.post(f"{base}/sessions/recall", json={"query": s}).status_code == 200
    # a field query must not reach other users or apps
    other = fresh()
    assert ca.post(f"{other}/memories/search", json={"query": "zebra0 OR user:*"}).json() == {"hits": []}


# ------------------------------------------------------------------ unicode
def test_unicode_edge_cases(sec: Served, ca: httpx.Client) -> None:
    base = fresh()
    texts = ["pay \u202eevil\u202c bill", "coder 👩\u200d💻 at work", "emoji 🦄𝄞 and 漢字", "zero\u200bwidth"]
    for t in texts:
        e = add(ca, base, t, topics=["👩\u200d💻"], participants=["Zoë"])
        assert e["text"] == t and ca.get(f"{base}/memories/{e['id']}").json()["text"] == t
    assert ca.post(f"{base}/memories/search", json={"query": "👩\u200d💻"}).status_code == 200
    for bad_user in ("u%E2%80%AE", "u%E2%80%8D", "u%00", "%00", "u%0A"):  # RTL override, ZWJ, NUL, LF
        r = ca.get(f"/v1/apps/{A}/users/{bad_user}/memories")
        assert r.status_code == 422 and r.json()["field"] == "user", (bad_user, r.text)
        r = ca.post(f"/v1/apps/{A}/users/{bad_user}/memories", json={"text": "x"})
        assert r.status_code == 422 and r.json()["field"] == "user"
    lone = '"\\ud800"'  # a JSON escape of a lone surrogate; Python's json.loads accepts it

    def with_lone(body: dict[str, Any]) -> str:
        return json.dumps(body).replace('"LONE"', lone)

    hostile = [
        ("memories", {"text": "LONE"}, "text"),
        ("memories", {"text": "x", "topics": ["LONE"]}, "topics"),
        ("memories", {"text": "x", "participants": ["LONE"]}, "participants"),
        ("memories", {"text": "x", "location": "LONE"}, "location"),
        ("memories", {"text": "x", "provenance": ["LONE"]}, "provenance"),
        ("memories/search", {"query": "LONE"}, "query"),
        ("preload", {"budget": -1, "playbook": "LONE"}, "playbook"),
        ("preload", {"budget": 1, "message": "LONE"}, "message"),
        ("sessions/recall", {"query": "LONE"}, "query"),
        ("tools/memory_add", {"arguments": {"memory": "x", "topics": ["LONE"]}}, "arguments.topics"),
    ]
    add(ca, base, "something to preload")
    for path, body, field in hostile:
        r = ca.post(f"{base}/{path}", content=with_lone(body), headers={"Content-Type": "application/json"})
        assert r.status_code == 422 and r.json()["field"].startswith(field), (path, body, r.text)
    r = ca.post(f"{base}/tools/memory_update", content=with_lone({"arguments": {"memory_id": "LONE", "memory": "z"}}),
                headers={"Content-Type": "application/json"})
    assert r.status_code == 404, r.text
    # invalid UTF-8 in the path (a CESU-8 surrogate, a stray byte) would alias to U+FFFD: refused
    for raw in ("%ED%A0%80", "%FF", "%C0%AF"):
        r = ca.get(f"/v1/apps/{A}/users/u{raw}/memories")
        assert r.status_code == 422 and r.json()["field"] == "path", (raw, r.text)
    # an app id made of 4-byte characters works end to end with its key
    with sec.client(headers=bearer(E)) as ce:
        entry = add(ce, fresh(E), "unicorn 🦄 memory")
        assert entry["app"] == E
        lines = ce.get(f"/v1/apps/{E}/export").text.splitlines()
        assert [json.loads(line)["id"] for line in lines] == [entry["id"]]
        assert ce.post(f"/v1/apps/{E}/import", content="\n".join(lines)).json()["entries"] == 1


# ------------------------------------------------------------------ paths and headers
def test_path_traversal_in_ids(ca: httpx.Client) -> None:
    """Ids a URL would change are refused naming the field (before the key is even checked); none reaches
    another user's data."""
    owner, intruder = fresh(), fresh()
    entry = add(ca, owner, "traversal target")
    user = owner.rsplit("/", 1)[1]
    for tail in (f"..%2F..%2Fusers%2F{user}%2Fmemories%2F{entry['id']}", f"%2e%2e%2F%2e%2e%2Fusers%2F{user}%2Fmemories",
                 "%2e%2e", "....%2F%2F", "%252e%252e"):
        r = ca.get(f"{intruder}/memories/{tail}")
        assert (r.status_code, r.json()["field"]) == (422, "memory_id"), (tail, r.text)
        assert entry["id"] not in r.text
    # a bare ".." is resolved by httpx itself to the intruder's own user path, which has only DELETE (405)
    r = ca.get(f"{intruder}/memories/..")
    assert r.status_code == 405 and r.url.path == intruder
    r = ca.get(f"{intruder}/memories/%2e%2e%5c%2e%2e")  # a backslash round-trips: an unknown id
    assert r.status_code == 404 and entry["id"] not in r.text
    for path, field in ((f"/v1/apps/{B}%2F..%2F{A}/users/{user}/memories", "app"),
                        (f"/v1/apps/{A}/users/{user}%2F..%2F{intruder.rsplit('/', 1)[1]}/memories", "user"),
                        (f"/v1/apps/{A}/users/%2e%2e/memories", "user"),
                        (f"/v1/apps/%2e%2e/users/{user}/memories", "app")):
        r = ca.get(path)
        assert (r.status_code, r.json()["field"]) == (422, field), (path, r.text)
        assert entry["id"] not in r.text
    assert [e["id"] for e in ca.get(f"{owner}/memories").json()["entries"]] == [entry["id"]]


def _raw_http(url: str, request: bytes) -> bytes:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(request)
        chunks = []
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
            if b"\r\n\r\n" in b"".join(chunks):
                break
        return b"".join(chunks)


def test_header_injection(sec: Served, ca: httpx.Client) -> None:
    base = fresh()
    for url in (f"{base}/memories/x%0D%0AX-Injected:%201", f"{base}/sessions/s%0D%0AX-Injected:%201/events",
                f"/v1/apps/{A}/users/u%0D%0AX-Injected:%201/memories", "/v1/jobs/1-x%0D%0AX-Injected:%201"):
        r = ca.request("POST" if "events" in url else "GET", url, json={"events": []})
        is_4xx(r)
        assert "x-injected" not in r.headers
    key = KEYS[A].encode()
    cases = [
        (b"Authorization: Bearer " + key + b"\r\n X-Injected: folded\r\n", 400),  # obsolete line folding
        (b"Authorization: Bearer " + key + b"\rX-Injected: 1\r\n", 400),  # bare CR
        (b"Authorization: Bearer " + key + b"\x00\r\n", 400),  # NUL
        (b"Authorization: Bearer " + key + b"\xff\xfe\r\n", 401),  # not ASCII: another (unknown) key
        (b"Authorization: Bearer " + key + b"\r\nAuthorization: Bearer " + KEYS[B].encode() + b"\r\n", 401),
        (b"Authorization: Bearer " + key + b"\r\n", 200),
    ]
    for header, status in cases:
        head = _raw_http(sec.url, f"GET /v1/apps/{A}/users/u/memories HTTP/1.1\r\nHost: x\r\n".encode() + header
                         + b"Connection: close\r\n\r\n")
        assert int(head.split(b" ", 2)[1]) == status, (header, head[:200])
        assert b"x-injected" not in head.lower()


# ------------------------------------------------------------------ secrets
@pytest.fixture
def logged_server(hashing_embedder: Any, tmp_path: Path) -> Iterator[str]:
    """A server whose uvicorn logs (access log included) propagate to the root logger (caplog)."""
    from actors.backend import LocalShardBackend
    from serve_apps.http.app import attach, create_app

    settings = Settings(data_dir=tmp_path, shards=2, embedder={"kind": "hashing", "dim": 256}, api_keys=KEYS,
                        http=HttpSettings(max_body_bytes=LIMIT))
    backend = LocalShardBackend(settings, embedder=hashing_embedder)
    app = create_app()
    attach(app, backend, settings)
    try:
        with run_app(app, log_config=None, log_level="debug", access_log=True) as url:
            yield url
    finally:
        backend.close()


def test_keys_never_reach_the_logs(logged_server: str, caplog: pytest.LogCaptureFixture,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "uvicorn.asgi"):
        monkeypatch.setattr(logging.getLogger(name), "propagate", True)
        monkeypatch.setattr(logging.getLogger(name), "disabled", False)
    caplog.set_level(logging.DEBUG)
    base = f"/v1/apps/{A}/users/logged"
    with httpx.Client(base_url=logged_server, timeout=30) as c:
        for key in (KEYS[A], KEYS[B], KEYS[A] + "x", KEYS[E][:-1]):
            h = {"Authorization": f"Bearer {key}"}
            c.post(f"{base}/memories", json={"text": "log probe"}, headers=h)
            c.post(f"{base}/memories", content=b"{", headers={**h, "Content-Type": "application/json"})
            c.get(f"{base}/memories/nope", headers=h)
            c.get(f"/v1/apps/{A}/export", headers=h)
            c.post(f"/v1/apps/{A}/import", content=b"not json", headers=h)
            c.get("/v1/jobs/0-nope", headers=h)
            c.get(f"/v1/apps/{A}/tools", headers={"Authorization": key})  # no scheme: 401
    access = [r for r in caplog.records if r.name == "uvicorn.access"]
    assert len(access) >= 20, "the access log was not captured"
    text = "\n".join(f"{r.name} {r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    for key in KEYS.values():
        assert key not in text and key[:-1] not in text


def test_settings_never_show_secrets() -> None:
    settings = Settings(api_keys=KEYS, vector_store={"api_key": "vs-secret-123456"},
                        embedder={"kind": "openai", "api_key": "emb-secret-123456"},
                        extractor={"api_key": "llm-secret-123456"})
    secrets = [*KEYS.values(), "vs-secret-123456", "emb-secret-123456", "llm-secret-123456"]
    shown = [repr(settings), str(settings), settings.model_dump_json(), json.dumps(settings.model_dump(mode="json")),
             repr(settings.model_dump()), repr(settings.api_keys), f"{settings}", repr(settings.vector_store)]
    for text in shown:
        for secret in secrets:
            assert secret not in text
    assert settings.api_key_map()[A] == KEYS[A]  # still usable where it is needed


def test_erasing_a_user_and_compacting_need_a_key(sec: Served, ca: httpx.Client) -> None:
    owner = fresh(B)
    with sec.client(headers=bearer(B)) as cb:
        add(cb, owner, "b's memory")
        r = ca.delete(owner)  # the key of app-a erases nobody of app-b
        assert r.status_code == 403 and r.json()["field"] == "app"
        with sec.client() as anonymous:
            assert anonymous.delete(owner).status_code == 401
            assert anonymous.post("/v1/admin/compact").status_code == 401
        assert [e["text"] for e in cb.get(f"{owner}/memories").json()["entries"]] == ["b's memory"]
        assert ca.post("/v1/admin/compact").status_code == 200  # any valid key may compact (it reveals nothing)
        assert cb.delete(owner).json()["entries"] == 1
