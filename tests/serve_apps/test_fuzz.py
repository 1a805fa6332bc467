"""Property-based fuzzing of the HTTP API from its own OpenAPI schema (schemathesis + hypothesis).

Every operation of the app's OpenAPI schema (one pytest item each; the live uvicorn server under
test, LocalShardBackend + hashing embedder + API keys, must serve that same ``/openapi.json``) gets a
bounded number of generated requests, valid and invalid (schemathesis' positive and negative modes).
The properties:

- no response is 5xx;
- every 4xx body is the one error shape ``{"error", "field", "message"}`` with a non-empty message,
  and a 422 names the field (``body`` when the whole body is wrong).

Requests carry the key of the app in their path (the generated ``app`` is mapped to the keyed app),
so they get past the auth check; most generated ids are made valid (see ``_steer``) so requests also
get past path validation to the shards. Hand-written properties: any search query (arbitrary unicode,
keyword-index syntax) answers 200; any Authorization header opens exactly the apps its key opens.

Examples per operation: ``MEMCLUSTER_FUZZ_EXAMPLES`` (default 25); ``MEMCLUSTER_FUZZ_COVERAGE=1`` adds
schemathesis' coverage phase (boundary values of every parameter; slower); ``MEMCLUSTER_FUZZ_SEED``
changes schemathesis' seed. Runs are derandomized, so a failure reproduces by re-running the test;
its message carries a curl command.
"""

from __future__ import annotations

import json
import os
import unicodedata
import zlib
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, unquote

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.vocabulary import ALL_TOOLS
from serve_apps.http.app import create_app
from serve_apps.mem0.errors import detail_of
from tests.serve_apps.conftest import AUTH_KEYS, Served

APP = "app-a"
AUTH = {"Authorization": f"Bearer {AUTH_KEYS[APP]}"}
ERROR_KEYS = {"error", "field", "message"}
EXAMPLES = int(os.environ.get("MEMCLUSTER_FUZZ_EXAMPLES", "25"))
COVERAGE = os.environ.get("MEMCLUSTER_FUZZ_COVERAGE", "") == "1"  # schemathesis' (unbounded) coverage phase

# Derandomized (reproducible), no example database, no deadline; only the health check about slow
# generation is off (the suite shares a loaded machine).
settings.register_profile(
    "memcluster-fuzz",
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
FUZZ = settings.get_profile("memcluster-fuzz")

CONFIG = schemathesis.Config.from_dict({
    "seed": int(os.environ.get("MEMCLUSTER_FUZZ_SEED", "20260720")),
    "headers": dict(AUTH),
    "phases": {"coverage": {"enabled": COVERAGE}, "stateful": {"enabled": False}},
    "generation": {"mode": "all", "max-examples": EXAMPLES, "deterministic": True,
                   "with-security-parameters": False, "database": "none"},
})


def check_response(response: Any, request: str) -> None:
    """The fuzz properties for one response (httpx or requests)."""
    status = response.status_code
    assert status < 500, f"{status} for {request}: {response.text[:2000]}"
    if status < 400:
        return
    try:
        body = response.json()
    except ValueError:
        pytest.fail(f"{status} without a JSON body for {request}: {response.text[:500]!r}")
    assert isinstance(body, dict), f"{status} not the error shape for {request}: {body}"
    if "detail" in body:  # the paths under /mem0 add the field Mem0's client reads (serve_apps.mem0.errors)
        assert body["detail"] == detail_of(body), f"{status} with a detail of its own for {request}: {body}"
    assert set(body) - {"detail"} == ERROR_KEYS, f"{status} not the error shape for {request}: {body}"
    assert isinstance(body["error"], str) and body["error"], f"{status} without an error class for {request}: {body}"
    assert isinstance(body["message"], str) and body["message"].strip(), f"{status} without a message: {request}"
    assert body["field"] is None or isinstance(body["field"], str), body
    if status == 422:
        assert body["field"], f"422 names no field for {request}: {body}"
    assert "Traceback" not in response.text


@pytest.fixture
def fuzz_server(make_server: Callable[..., Served]) -> Served:
    return make_server(api_keys=AUTH_KEYS)


# The operations are collected from the app's schema document (one pytest item per operation); every
# test checks that the live server serves that very document before fuzzing it. (schemathesis'
# ``pytest.from_fixture`` lazy loader does not run under pytest 9: it sets ``Function._nodeid``.)
OPENAPI = create_app().openapi()
schema = schemathesis.openapi.from_dict(OPENAPI, config=CONFIG)


@schemathesis.serializer("application/x-ndjson")
def _ndjson(ctx: Any, value: Any) -> bytes:
    """JSON Lines bodies (the import route): strings as UTF-8, a list one JSON value per line."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, list):
        return "".join(json.dumps(v) + "\n" for v in value).encode("utf-8")
    return json.dumps(value).encode("utf-8")


def _pick(value: str, n: int) -> int:
    """A deterministic choice in 0..n-1 from a generated value (keeps runs reproducible)."""
    return zlib.crc32(value.encode("utf-8", "surrogatepass")) % n


def _usable_id(value: str) -> str:
    """``value`` made into a valid app/user/session id: no control/unassigned characters or '/'."""
    kept = "".join(ch for ch in value if ch != "/" and not unicodedata.category(ch).startswith("C"))
    return kept.strip()[:128].strip() or "u"


def _steer(case: Any, base_url: str) -> None:
    """Map generated path parameters so most requests get past auth and path checks to the shards.

    The app becomes the keyed app (the key opens only it); three in four user and session ids are made
    valid and two in three tool names become real tools (the rest stay as generated, to fuzz the
    checks); half the memory ids become the id of a memory just stored for that user, and half the
    import bodies a real export (after storing the generated text). Generated path parameters arrive
    percent-encoded.
    """
    params = case.path_parameters
    if not params:
        return
    if case.path.endswith("/import") and isinstance(case.body, str) and _pick(case.body, 2):
        httpx.post(f"{base_url}/v1/apps/{APP}/users/importer/memories", headers=AUTH,
                   json={"text": case.body[:4000] or "x"}, timeout=60)
        exported = httpx.get(f"{base_url}/v1/apps/{APP}/export", headers=AUTH, timeout=60)
        assert exported.status_code == 200, exported.text
        case.body = exported.text
    if "app" in params:
        params["app"] = APP
    for name in ("user", "session"):
        value = params.get(name)
        if isinstance(value, str) and _pick(value, 4):
            params[name] = quote(_usable_id(unquote(value)), safe="")
    name = params.get("name")
    if isinstance(name, str) and _pick(name, 3):
        params["name"] = ALL_TOOLS[_pick(name + "#", len(ALL_TOOLS))]
    memory_id = params.get("memory_id")
    if isinstance(memory_id, str) and isinstance(params.get("user"), str) and _pick(memory_id, 2):
        user = params["user"]
        r = httpx.post(f"{base_url}/v1/apps/{APP}/users/{user}/memories", headers=AUTH,
                       json={"text": f"fuzz memory {memory_id!r}"}, timeout=60)
        if r.status_code == 201:
            params["memory_id"] = quote(r.json()["id"], safe="")


@pytest.fixture
def fuzz_url(fuzz_server: Served) -> str:
    with fuzz_server.client() as c:
        served = c.get("/openapi.json").json()
    assert served == OPENAPI, "the live server's /openapi.json differs from the collected schema"
    return fuzz_server.url


# One server per operation, shared by its examples on purpose (hence function_scoped_fixture).
@schema.parametrize()
@settings(FUZZ, suppress_health_check=[*FUZZ.suppress_health_check, HealthCheck.function_scoped_fixture])
def test_openapi_operations(case: Any, fuzz_url: str) -> None:
    _steer(case, fuzz_url)
    response = case.call(base_url=fuzz_url, headers=AUTH, timeout=60)
    check_response(response, f"{case.method} {case.formatted_path}\n{case.as_curl_command(headers=AUTH)}")


# ------------------------------------------------------------------ search queries
_TANTIVY = st.sampled_from([
    '"', '""', '"unterminated', "AND", "OR", "NOT", "&&", "||", "!", "+", "-", "*", "?", "~", "~2", "^", "^3",
    "(", ")", "()", "[", "]", "{", "}", "[a TO z]", "{1 TO *}", ":", "text:", "text:tea", "id:*", "app:other",
    "user:*", "IN [a b]", "/re.*gex/", "\\", "\\\\", "\x00", "\u200b", "\ufeff", "\U0001f600", "e\u0301",
    "ß", "İ", "\u202e", "a" * 300, " ", "\t", "\n",
])
_QUERY = st.lists(st.one_of(_TANTIVY, st.text(max_size=40)), max_size=12).map(" ".join) | st.text(max_size=200)


@pytest.fixture
def search_server(make_server: Callable[..., Served]) -> Served:
    served = make_server(api_keys=AUTH_KEYS)
    with served.client(headers=AUTH) as c:
        for text in ("Alice drinks green tea", 'the "quoted" AND text:field', "Zoë visited Zürich in 2024",
                     "NOT a query (really) [x TO y]"):
            r = c.post(f"/v1/apps/{APP}/users/searcher/memories", json={"text": text})
            assert r.status_code == 201, r.text
    return served


def test_any_search_query_answers_200(search_server: Served) -> None:
    with search_server.client(headers=AUTH) as client:

        @settings(FUZZ, max_examples=max(EXAMPLES * 4, 20))
        @given(query=_QUERY, hybrid=st.booleans(), max_results=st.integers(1, 50))
        def search(query: str, hybrid: bool, max_results: int) -> None:
            body = {"query": query, "hybrid": hybrid, "max_results": max_results}
            r = client.post(f"/v1/apps/{APP}/users/searcher/memories/search", json=body)
            assert r.status_code == 200, f"{r.status_code} for {body!r}: {r.text[:1000]}"
            hits = r.json()["hits"]
            assert len(hits) <= max_results
            assert all(h["entry"]["user"] == "searcher" and h["entry"]["app"] == APP for h in hits)

        search()


# ------------------------------------------------------------------ keys
KEY_A = AUTH_KEYS["app-a"]
_AUTH_HEADERS = st.one_of(
    st.none(),
    st.sampled_from([f"Bearer {KEY_A}", f"bearer {KEY_A}", f"Bearer {AUTH_KEYS['app-b']}", f"Basic {KEY_A}",
                     f"Bearer {KEY_A}x", f"Bearer {KEY_A[:-1]}", "Bearer", "Bearer null", KEY_A]),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=60),
    st.builds("Bearer {}".format, st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1)),
)


def test_keys_open_only_their_app(search_server: Served) -> None:
    """Any Authorization header against any app: 401 without a known key, 403 with another app's key,
    200 with the app's own key; always the error shape."""
    with search_server.client() as client:

        @settings(FUZZ, max_examples=max(EXAMPLES * 2, 20))
        # not a route of this app (404 before any key check): "." and ".." (dot segments the client
        # resolves away) and a "/" (even sent as %2F, the server matches routes on the decoded path)
        @given(app=st.sampled_from(["app-a", "app-b", "app-c"]) | st.text(min_size=1, max_size=20)
               .filter(lambda a: a not in (".", "..") and "/" not in a), auth=_AUTH_HEADERS)
        def call(app: str, auth: str | None) -> None:
            headers = {} if auth is None else {"Authorization": auth}
            r = client.get(f"/v1/apps/{quote(app, safe='')}/users/searcher/memories", headers=headers)
            check_response(r, f"GET as {auth!r} on app {app!r}")
            scheme, _, token = (auth or "").partition(" ")
            granted = {a for a, k in AUTH_KEYS.items() if scheme.lower() == "bearer" and token.strip() == k}
            if not granted:
                assert r.status_code == 401 and r.json()["field"] == "authorization", r.text
            elif app not in granted:
                assert r.status_code == 403 and r.json()["field"] == "app", r.text
            else:
                assert r.status_code == 200, r.text

        call()


def test_error_checker_rejects_bad_shapes() -> None:
    """The property itself: a 5xx, a shapeless 4xx and a 422 without a field all fail it."""

    def response(status: int, body: Any) -> httpx.Response:
        return httpx.Response(status, json=body)

    check_response(response(422, {"error": "ValidationError", "field": "text", "message": "too long"}), "ok")
    check_response(response(404, {"error": "NotFoundError", "field": None, "message": "no such memory"}), "ok")
    check_response(response(422, {"error": "ValidationError", "field": "user_id", "message": "required",
                                  "detail": "user_id: required"}), "ok")  # Mem0's paths add detail
    for bad in (response(503, {"error": "StoreError", "field": "store", "message": "x"}),
                response(400, {"detail": "nope"}),
                response(400, {"error": "ValidationError", "field": "x", "message": "bad", "detail": "other"}),
                response(422, {"error": "ValidationError", "field": None, "message": "bad"}),
                response(404, {"error": "NotFoundError", "field": None, "message": " "})):
        with pytest.raises(AssertionError):
            check_response(bad, "bad")
