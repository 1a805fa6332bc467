"""memclient against the real HTTP app (uvicorn over LocalShardBackend) plus MockTransport cases."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from memclient import (
    AsyncMemoryClient,
    AuthError,
    Conflict,
    Entry,
    InvalidRequest,
    Job,
    MemclientError,
    MemoryClient,
    NotFound,
    PreloadResult,
    Retry,
    SearchHit,
    Unavailable,
    Unreachable,
)
from tests.live_server import LiveServer

APP, KEY = "app-a", "key-a"
OTHER_APP, OTHER_KEY = "app-b", "key-b"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    from actors.backend import LocalShardBackend
    from memcore.settings import Settings
    from memcore.stores.embedders import HashingEmbedder
    from serve_apps.http.app import attach, create_app

    settings = Settings(data_dir=tmp_path_factory.mktemp("memclient"), shards=2,
                        api_keys={APP: KEY, OTHER_APP: OTHER_KEY})
    backend = LocalShardBackend(settings, embedder=HashingEmbedder(dim=256))
    app = create_app()
    attach(app, backend, settings)
    with LiveServer(app) as live:
        yield live
    backend.close()


@pytest.fixture
def client(server: LiveServer) -> Iterator[MemoryClient]:
    with MemoryClient(server.url, api_key=KEY) as mc:
        yield mc


@pytest.fixture
def user() -> str:
    return f"u-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------------------- sync, real server
def test_health_and_ready(client: MemoryClient) -> None:
    assert client.healthz() == {"status": "ok"}
    ready = client.readyz()
    assert ready["status"] == "ready" and len(ready["shards"]) == 2


def test_crud_round_trip(client: MemoryClient, user: str) -> None:
    when = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    entry = client.add(APP, user, "  Alice moved to Lisbon.  ", topics=["home"], kind="episode", event_time=when,
                       participants=["Alice"], location="Lisbon", source="user", provenance=["D1:1"])
    assert isinstance(entry, Entry)
    assert (entry.app, entry.user, entry.text, entry.kind) == (APP, user, "Alice moved to Lisbon.", "episode")
    assert entry.event_time == when and entry.participants == ["Alice"] and entry.location == "Lisbon"
    assert entry.provenance == ["D1:1"] and entry.topics == ["home"] and entry.active
    assert entry.created_at.tzinfo is not None

    assert client.get(APP, user, entry.id) == entry
    fact = client.add(APP, user, "Alice prefers green tea.")
    assert [e.id for e in client.read(APP, user)] == [fact.id, entry.id]
    assert [e.id for e in client.read(APP, user, limit=1)] == [fact.id]

    updated = client.update(APP, user, fact.id, "Alice prefers black coffee.", topics=["drinks"])
    assert updated.id != fact.id and updated.text == "Alice prefers black coffee."  # the id rotated
    assert updated.topics == ["drinks"]
    with pytest.raises(NotFound) as nf:
        client.get(APP, user, fact.id)
    assert nf.value.status == 404 and nf.value.error == "NotFoundError"

    client.delete(APP, user, updated.id)
    with pytest.raises(NotFound):
        client.get(APP, user, updated.id)
    client.delete(APP, user, entry.id, hard=True)
    assert client.read(APP, user) == []

    client.add(APP, user, "one")
    client.add(APP, user, "two")
    client.clear(APP, user, hard=False)
    assert client.read(APP, user) == []
    client.clear(APP, user)


def test_search_and_preload(client: MemoryClient, user: str) -> None:
    for text in ("The user is allergic to peanuts.", "The user lives in Berlin.", "The user plays the cello."):
        client.add(APP, user, text)
    hits = client.search(APP, user, "peanuts allergy", max_results=2)
    assert hits and isinstance(hits[0], SearchHit)
    assert hits[0].entry.text == "The user is allergic to peanuts." and len(hits) <= 2
    dense = client.search(APP, user, "peanuts", hybrid=False, similarity_threshold=-1.0, kind="fact",
                          time_from=datetime(2000, 1, 1, tzinfo=UTC), kind_fallback=False, deduplicate=True,
                          order_by_event_time=False, rrf_k=60)
    assert all(h.score >= -1.0 for h in dense)
    plain = client.search(APP, user, "Where does the user live?", rrf_k=60, dense_weight=1.0, keyword_weight=1.0,
                          keyword_query="raw", date_boost=False, merge_overlapping=False)
    assert len(plain) == 3 and all(h.merged == () for h in plain)
    for name, bad_value in (("dense_weight", -1.0), ("keyword_weight", 101.0), ("rrf_k", 0)):
        with pytest.raises(InvalidRequest) as refused:  # each option reaches the server, which validates it
            client.search(APP, user, "q", **{name: bad_value})
        assert name in str(refused.value)
    with pytest.raises(InvalidRequest) as bad:
        client.search(APP, user, "q", keyword_query="fuzzy")
    assert "keyword_query" in str(bad.value)

    pre = client.preload(APP, user, budget=10, message="what should I cook?")
    assert isinstance(pre, PreloadResult)
    assert pre.strategy == "all" and pre.mode == "system" and len(pre.entries) == 3
    assert "allergic to peanuts" in pre.text
    pre = client.preload(APP, user, budget=1, message="Am I allergic to anything? peanuts", mode="user",
                         playbook="Known facts:")
    assert pre.strategy == "search" and pre.mode == "user" and len(pre.entries) == 1
    assert pre.text.startswith("Known facts:")
    assert client.preload(APP, user, budget=0).strategy == "off"


def test_search_and_preload_by_topics(client: MemoryClient, user: str) -> None:
    tea = client.add(APP, user, "Drinks green tea every morning", topics=["drinks", "morning"])
    coffee = client.add(APP, user, "Drinks coffee after lunch", topics=["drinks"])
    client.add(APP, user, "Drinks water at the gym, drinks drinks")
    anyof = client.search(APP, user, "drinks", topics=["drinks"], max_results=5)
    assert {h.entry.id for h in anyof} == {tea.id, coffee.id}
    allof = client.search(APP, user, "drinks", topics=["drinks", "morning"], topics_match="all")
    assert [h.entry.id for h in allof] == [tea.id]
    with pytest.raises(InvalidRequest) as bad:
        client.search(APP, user, "q", topics=["a"], topics_match="most")
    assert bad.value.field == "topics_match"
    pre = client.preload(APP, user, budget=-1, topics=["morning"])
    assert [e.id for e in pre.entries] == [tea.id]


def test_tools(client: MemoryClient, user: str) -> None:
    names = [t["function"]["name"] for t in client.tools(APP)]
    assert names == ["memory_add", "memory_update", "memory_search", "memory_load"]
    assert [t["function"]["name"] for t in client.tools(APP, mode="agentic")] == names
    with pytest.raises(AuthError) as other_mode:  # the app's mode is the deployment's
        client.tools(APP, mode="auto")
    assert other_mode.value.status == 403

    added = client.call_tool(APP, user, "memory_add", {"memory": "User's cat is called Miso.", "topics": ["pets"]})
    assert added["status"] == "ok" and added["memory_id"]
    found = client.call_tool(APP, user, "memory_search", {"query": "cat name"})
    assert found["count"] == 1 and found["results"][0]["memory"] == "User's cat is called Miso."
    loaded = client.call_tool(APP, user, "memory_load", {"limit": 5})
    assert loaded["results"][0]["memory_id"] == added["memory_id"]

    with pytest.raises(AuthError) as denied:  # disabled in agentic mode
        client.call_tool(APP, user, "memory_delete", {"memory_id": added["memory_id"]})
    assert denied.value.status == 403
    with pytest.raises(InvalidRequest) as bad:
        client.call_tool(APP, user, "memory_add", {"memory": ""})
    assert bad.value.field == "arguments.memory"
    with pytest.raises(NotFound):
        client.call_tool(APP, user, "memory_frobnicate", {})


def test_typed_errors(server: LiveServer, client: MemoryClient, user: str) -> None:
    with pytest.raises(NotFound):
        client.get(APP, user, "no-such-id")
    with pytest.raises(NotFound):
        client.update(APP, user, "no-such-id", "text")

    a = client.add(APP, user, "Bob likes jazz.")
    client.add(APP, user, "Bob likes blues.")
    with pytest.raises(Conflict) as conflict:  # rotating a onto the active "blues" entry
        client.update(APP, user, a.id, "Bob likes blues.")
    assert conflict.value.status == 409 and conflict.value.error == "ConflictError"

    with pytest.raises(InvalidRequest) as empty:
        client.add(APP, user, "   ")
    assert empty.value.status == 422 and empty.value.field == "text"
    with pytest.raises(InvalidRequest) as limit:
        client.search(APP, user, "jazz", max_results=0)
    assert limit.value.field == "max_results"
    with pytest.raises(InvalidRequest) as big:
        client.add(APP, user, "x" * 2_000_000)
    assert big.value.status == 413

    with MemoryClient(server.url, api_key="wrong") as bad:
        with pytest.raises(AuthError) as unknown:
            bad.read(APP, user)
    assert unknown.value.status == 401
    with MemoryClient(server.url) as anonymous:
        with pytest.raises(AuthError):
            anonymous.tools(APP)
        assert anonymous.healthz()["status"] == "ok"  # health is open
    with MemoryClient(server.url, api_key=OTHER_KEY) as other:
        with pytest.raises(AuthError) as forbidden:
            other.read(APP, user)
        assert forbidden.value.status == 403 and isinstance(forbidden.value, MemclientError)
        assert other.read(OTHER_APP, user) == []


def test_path_segments_are_quoted(client: MemoryClient) -> None:
    odd = "user with space?&#%é"  # "/" is not addressable: Starlette routes on the decoded path
    entry = client.add(APP, odd, "odd names are kept apart")
    assert entry.user == odd
    assert client.get(APP, odd, entry.id).text == "odd names are kept apart"
    assert client.read(APP, "user") == []


def test_unreachable() -> None:
    with MemoryClient("http://127.0.0.1:9", timeout=2.0, retry=Retry(backoff=0.01)) as mc, pytest.raises(Unreachable):
        mc.healthz()


def test_update_names_the_expiry(client: MemoryClient, user: str) -> None:
    e = client.add(APP, user, "Alice's gate is B12.", ttl_s=60)
    renewed = client.update(APP, user, e.id, "Alice's gate is B12.", ttl_s=3600)
    assert renewed.id == e.id and renewed.expires_at is not None
    assert (renewed.expires_at - renewed.updated_at).total_seconds() == 3600
    at = datetime(2099, 1, 31, tzinfo=UTC)
    assert client.update(APP, user, e.id, "Alice's gate is B12.", expires_at=at).expires_at == at
    kept = client.update(APP, user, e.id, "Alice's gate is B12.", topics=["trip"])
    assert kept.expires_at == at
    forever = client.update(APP, user, e.id, "Alice's gate is B12.", no_expiry=True)
    assert forever.id == e.id and forever.expires_at is None and client.get(APP, user, e.id).expires_at is None
    with pytest.raises(InvalidRequest) as bad:
        client.update(APP, user, e.id, "Alice's gate is B12.", ttl_s=10, expires_at=at)
    assert bad.value.status == 422 and bad.value.field == "expires_at"


# ---------------------------------------------------------------------------- async, real server
async def test_async_client_every_method(server: LiveServer, user: str) -> None:
    async with AsyncMemoryClient(server.url, api_key=KEY) as mc:
        assert (await mc.healthz())["status"] == "ok"
        assert (await mc.readyz())["status"] == "ready"
        entry = await mc.add(APP, user, "Carol runs marathons.", topics=["sport"])
        assert (await mc.get(APP, user, entry.id)).text == "Carol runs marathons."
        assert [e.id for e in await mc.read(APP, user, limit=10)] == [entry.id]
        moved = await mc.update(APP, user, entry.id, "Carol runs ultramarathons.", ttl_s=900)
        assert moved.expires_at is not None
        assert (moved.expires_at - moved.updated_at).total_seconds() == 900
        assert (await mc.update(APP, user, moved.id, moved.text, no_expiry=True)).expires_at is None
        hits = await mc.search(APP, user, "ultramarathons", max_results=3)
        assert hits[0].entry.id == moved.id
        pre = await mc.preload(APP, user, budget=5, message="sport?")
        assert [e.id for e in pre.entries] == [moved.id]
        assert "memory_search" in [t["function"]["name"] for t in await mc.tools(APP, "agentic")]
        res = await mc.call_tool(APP, user, "memory_search", {"query": "Carol"}, mode="agentic")
        assert res["count"] == 1
        await mc.delete(APP, user, moved.id, hard=True)
        with pytest.raises(NotFound):
            await mc.get(APP, user, moved.id)
        await mc.add(APP, user, "temporary")
        await mc.clear(APP, user)
        assert await mc.read(APP, user) == []
        with pytest.raises(InvalidRequest) as bad:
            await mc.add(APP, user, "")
        assert bad.value.field == "text"
    async with AsyncMemoryClient(server.url, api_key="wrong") as wrong:
        with pytest.raises(AuthError):
            await wrong.read(APP, user)


# ---------------------------------------------------------------------------- MockTransport
def test_async_client_across_event_loops(server: LiveServer, user: str) -> None:
    """One AsyncMemoryClient, a second asyncio.run after the first loop closed, and four loops at once in
    threads: each loop gets its own connection pool (no 'Event loop is closed')."""
    import asyncio
    import threading

    mc = AsyncMemoryClient(server.url, api_key=KEY)
    asyncio.run(mc.add(APP, user, "Loop one."))
    asyncio.run(mc.add(APP, user, "Loop two."))
    failures: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            asyncio.run(mc.add(APP, user, f"Thread {n}."))
        except BaseException as exc:  # noqa: BLE001 - collected for the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert failures == []

    async def texts() -> list[str]:
        try:
            return sorted(e.text for e in await mc.read(APP, user, limit=20))
        finally:
            await mc.close()

    assert asyncio.run(texts()) == ["Loop one.", "Loop two.", *[f"Thread {n}." for n in range(4)]]
    assert not mc._pools or all(p.is_closed for p in mc._pools.values())


def _unavailable(request: httpx.Request) -> httpx.Response:
    return httpx.Response(503, headers={"Retry-After": "7"},
                          json={"error": "StoreError", "field": "store", "message": "qdrant is down"})


def test_503_is_unavailable_with_retry_after() -> None:
    with MemoryClient(api_key=KEY, transport=httpx.MockTransport(_unavailable), retry=Retry.never()) as mc:
        with pytest.raises(Unavailable) as exc:
            mc.search(APP, "u", "anything")
    err = exc.value
    assert (err.status, err.error, err.field, err.retry_after) == (503, "StoreError", "store", 7.0)
    assert "qdrant is down" in str(err)


async def test_async_503_is_unavailable() -> None:
    async with AsyncMemoryClient(transport=httpx.MockTransport(_unavailable), retry=Retry.never()) as mc:
        with pytest.raises(Unavailable) as exc:
            await mc.readyz()
    assert exc.value.retry_after == 7.0


def test_non_json_error_and_fastapi_detail() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/healthz":
            return httpx.Response(502, text="bad gateway")
        return httpx.Response(422, json={"detail": [{"loc": ["body", "max_results"], "msg": "too small"}]})

    with MemoryClient(transport=httpx.MockTransport(handler), retry=Retry.never()) as mc:
        with pytest.raises(MemclientError) as gateway:
            mc.healthz()
        assert gateway.value.status == 502 and gateway.value.message == "bad gateway"
        with pytest.raises(InvalidRequest) as detail:
            mc.search(APP, "u", "q", max_results=0)
        assert detail.value.field == "max_results"


class _AutoMemoryStub:
    """Answers the auto-memory routes (ingest, jobs, recall) and records what it was sent."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, dict[str, Any] | None, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        raw_path = request.url.raw_path.decode().partition("?")[0]
        self.seen.append((request.method, raw_path, body, request.headers.get("authorization")))
        if request.url.path.endswith("/events"):
            return httpx.Response(202, json={"job_id": "job-1"})
        if request.url.path.startswith("/v1/jobs/"):
            return httpx.Response(200, json={"job_id": "job-1", "status": "done", "operations": [{"type": "add"}]})
        hit = {"session": "s1", "event_id": "e1", "role": "user", "content": "hello",
               "timestamp": "2024-01-01T00:00:00Z", "score": 0.5}
        return httpx.Response(200, json={"hits": [hit]})


def _check_auto_memory_calls(stub: _AutoMemoryStub, job_id: str, job: Job, recalled: dict[str, Any]) -> None:
    assert job_id == "job-1"
    assert job.job_id == "job-1" and job.status == "done" and job.finished
    assert job.data["operations"] == [{"type": "add"}]
    assert recalled["hits"][0]["session"] == "s1"
    (m1, p1, b1, auth), (m2, p2, _, _), (m3, p3, b3, _) = stub.seen
    assert (m1, p1, auth) == ("POST", "/v1/apps/app-a/users/u%201/sessions/s%201/events", f"Bearer {KEY}")
    assert b1 == {"events": [{"id": "e1", "role": "user", "content": "hi", "timestamp": "2024-01-01T00:00:00+00:00"}]}
    assert (m2, p2) == ("GET", "/v1/jobs/job-1")
    assert (m3, p3, b3) == ("POST", "/v1/apps/app-a/users/u%201/sessions/recall",
                            {"query": "hello", "max_results": 3})


_EVENTS = [{"id": "e1", "role": "user", "content": "hi", "timestamp": datetime(2024, 1, 1, tzinfo=UTC)}]


def test_auto_memory_methods() -> None:
    stub = _AutoMemoryStub()
    with MemoryClient(api_key=KEY, transport=httpx.MockTransport(stub)) as mc:
        job_id = mc.ingest(APP, "u 1", "s 1", _EVENTS).job_id
        _check_auto_memory_calls(stub, job_id, mc.job(job_id), mc.recall(APP, "u 1", "hello", max_results=3))


async def test_async_auto_memory_methods() -> None:
    stub = _AutoMemoryStub()
    async with AsyncMemoryClient(api_key=KEY, transport=httpx.MockTransport(stub)) as mc:
        job_id = (await mc.ingest(APP, "u 1", "s 1", _EVENTS)).job_id
        job, recalled = await mc.job(job_id), await mc.recall(APP, "u 1", "hello", max_results=3)
        _check_auto_memory_calls(stub, job_id, job, recalled)


class _JobStates:
    """A job that is ``running`` for the first ``running`` polls, then ``done`` (its polls are counted)."""

    def __init__(self, running: int) -> None:
        self.running, self.polls = running, 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.method == "GET" and request.url.path == "/v1/jobs/job-1"
        self.polls += 1
        status = "running" if self.polls <= self.running else "done"
        return httpx.Response(200, json={"job_id": "job-1", "status": status})


def test_wait_job_polls_until_the_job_is_finished() -> None:
    states = _JobStates(running=2)
    with MemoryClient(api_key=KEY, transport=httpx.MockTransport(states)) as mc:
        job = mc.wait_job("job-1", timeout=10)
    assert job.finished and job.status == "done" and states.polls == 3


async def test_async_wait_job_returns_the_unfinished_job_after_the_timeout() -> None:
    states = _JobStates(running=10**6)
    async with AsyncMemoryClient(api_key=KEY, transport=httpx.MockTransport(states)) as mc:
        job = await mc.wait_job("job-1", timeout=0.2)
    assert not job.finished and job.status == "running" and 2 <= states.polls < 100


def test_wait_job_waits_for_a_real_ingest_job(client: MemoryClient) -> None:
    job = client.ingest(APP, "waiter", "s1", _EVENTS)
    final = client.wait_job(job.job_id, timeout=30)
    assert final.job_id == job.job_id and final.finished and final.status == "done"
    assert final.data["counts"]["events"] == 1


# ---------------------------------------------------------------------------- packaging
def test_imports_without_server_dependencies() -> None:
    code = ("import sys; import memclient; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('memcore', 'pydantic', 'ray', 'numpy')); "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_partial_and_unknown_job_states_are_finished() -> None:
    partial = Job.from_json({"job_id": "j1", "status": "partial", "operations": [
        {"index": 0, "type": "add", "status": "applied"},
        {"index": 1, "type": "update", "status": "failed", "error": "StoreError: disk full"}]})
    assert partial.finished and [op["index"] for op in partial.failed_operations] == [1]
    assert Job.from_json({"job_id": "j2", "status": "some-later-state"}).finished
    assert not Job.from_json({"job_id": "j3", "status": "running"}).finished
    assert not Job.from_json({"job_id": "j4", "status": "queued"}).finished
