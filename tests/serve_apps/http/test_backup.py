"""Backups over real HTTP: export one app as JSONL, import it into a fresh service, export again
(byte-identical), same searches; validation before any write; auth; body limits; memctl."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import httpx
import pytest

from cluster import cli
from memcore.errors import ValidationError
from memcore.model import Entry
from memcore.settings import HttpSettings, Settings
from memcore.validation import make_key
from tests.serve_apps.conftest import AUTH_KEYS, MAX_BODY


class Served(Protocol):
    url: str
    settings: Settings | None

    def client(self, **kwargs: Any) -> httpx.Client: ...


A, B = "app-a", "app-b"
KEY_A = {"Authorization": f"Bearer {AUTH_KEYS[A]}"}
KEY_B = {"Authorization": f"Bearer {AUTH_KEYS[B]}"}
QUERIES = ["green tea", "Lisbon trip with Bob", "chess", "violin lessons", "red bike", "novels"]


def _ok(r: httpx.Response, status: int = 200) -> Any:
    assert r.status_code == status, r.text
    return r.json() if r.content else None


def _populate(c: httpx.Client) -> None:
    """Every kind of stored state: topics, episodes, provenance, assistant source, a rotation's tombstone,
    a soft delete, a clear, a reactivated entry, unicode; plus another app that must not be exported."""
    for user in ("zoe", "alice", "bob", "ünï-çødé 用户"):
        base = f"/v1/apps/{A}/users/{user}/memories"
        _ok(c.post(base, json={"text": f"{user} likes green tea", "topics": ["drinks", "tea"],
                               "provenance": ["s1:1", "s1:2"]}), 201)
        _ok(c.post(base, json={"text": f"{user} went on a Lisbon trip with Bob", "kind": "episode",
                               "event_time": "2024-03-01T10:00:00.123456+02:00", "participants": ["Bob", user],
                               "location": "Lisbon", "source": "assistant"}), 201)
        chess = _ok(c.post(base, json={"text": f"{user} plays chess on Sundays"}), 201)
        _ok(c.patch(f"{base}/{chess['id']}", json={"text": f"{user} plays chess on Saturdays"}))  # rotation
        violin = _ok(c.post(base, json={"text": f"{user} takes violin lessons"}), 201)
        _ok(c.delete(f"{base}/{violin['id']}"), 204)  # tombstone
        _ok(c.post(base, json={"text": f"{user} reads novels — 📚 “quoted” \u2028 line sep"}), 201)
    bob = f"/v1/apps/{A}/users/bob/memories"
    _ok(c.delete(bob), 204)  # clear: everything of bob becomes a tombstone
    _ok(c.post(bob, json={"text": "bob owns a red bike", "topics": ["bike"]}), 201)
    _ok(c.post(bob, json={"text": "bob likes green tea", "topics": ["again"]}), 201)  # reactivated tombstone
    other = {"Authorization": f"Bearer {AUTH_KEYS[B]}"}
    _ok(c.post(f"/v1/apps/{B}/users/alice/memories", json={"text": "app b secret"}, headers=other), 201)


def _export(c: httpx.Client, app: str = A, headers: dict[str, str] | None = None) -> httpx.Response:
    r = c.get(f"/v1/apps/{app}/export", headers=headers or KEY_A)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/x-ndjson")
    return r


def _searches(c: httpx.Client, users: list[str]) -> dict[tuple[str, str, str], Any]:
    """Per user and query: the hybrid hits' ids (BM25 statistics of a fresh index differ from one with
    deleted documents, so near-ties may swap) and the dense hits with their scores."""
    out: dict[tuple[str, str, str], Any] = {}
    for user in users:
        for q in QUERIES:
            hits = _ok(c.post(f"/v1/apps/{A}/users/{user}/memories/search", json={"query": q}))["hits"]
            out[(user, q, "hybrid")] = sorted(h["entry"]["id"] for h in hits)
            hits = _ok(c.post(f"/v1/apps/{A}/users/{user}/memories/search",
                              json={"query": q, "hybrid": False, "similarity_threshold": -1}))["hits"]
            out[(user, q, "dense")] = sorted((round(h["score"], 5), h["entry"]["id"]) for h in hits)
    return out


def test_export_import_round_trips_exactly(make_server: Callable[..., Served]) -> None:
    src = make_server(api_keys=AUTH_KEYS)
    with src.client(headers=KEY_A) as c:
        _populate(c)
        first = _export(c)
        users = sorted({json.loads(line)["user"] for line in first.text.splitlines()})
        before = _searches(c, users)
        listed = {u: _ok(c.get(f"/v1/apps/{A}/users/{u}/memories"))["entries"] for u in users}
    body = first.content
    assert body.endswith(b"\n") and body.isascii()
    lines = [json.loads(line) for line in body.decode().split("\n")[:-1]]
    assert first.headers["X-Memcluster-Users"] == "4"
    assert {e["app"] for e in lines} == {A}
    assert [(e["user"], e["id"]) for e in lines] == sorted((e["user"], e["id"]) for e in lines)
    assert len(lines) == 4 * 6 + 1  # 6 entries per user (the rotated one stays as a tombstone), a red bike
    deleted = [e for e in lines if e["deleted_at"]]
    assert len(deleted) == 4 * 2 + 3  # rotated + violin per user; bob's clear hit 3 more (tea came back)
    assert list(lines[0]) == ["id", "app", "user", "kind", "text", "topics", "event_time", "participants",
                              "location", "source", "provenance", "created_at", "updated_at", "deleted_at",
                              "metadata", "key", "expires_at"]
    assert any(e["source"] == "assistant" and e["participants"] and e["provenance"] == [] for e in lines)
    assert any(e["provenance"] == ["s1:1", "s1:2"] for e in lines)

    # a fresh service with another shard count: same bytes out, same answers
    dst = make_server(api_keys=AUTH_KEYS, shards=3)
    with dst.client(headers=KEY_A) as c:
        summary = _ok(c.post(f"/v1/apps/{A}/import", content=body,
                             headers={"Content-Type": "application/x-ndjson"}))
        assert summary == {"app": A, "entries": len(lines), "users": 4, "active": len(lines) - len(deleted),
                           "deleted": len(deleted)}
        second = _export(c)
        assert second.content == body
        assert _searches(c, users) == before
        assert {u: _ok(c.get(f"/v1/apps/{A}/users/{u}/memories"))["entries"] for u in users} == listed
        for e in deleted:  # tombstones stay invisible, a re-add reactivates them with their created_at
            base = f"/v1/apps/{A}/users/{e['user']}/memories"
            assert c.get(f"{base}/{e['id']}").status_code == 404
        tomb = next(e for e in deleted if "violin" in e["text"])
        again = _ok(c.post(f"/v1/apps/{A}/users/{tomb['user']}/memories", json={"text": tomb["text"]}), 201)
        assert again["id"] == tomb["id"] and again["created_at"] == tomb["created_at"]
        # the other app was neither exported nor imported
        assert _export(c, B, KEY_B).content == b""
        # importing the same file again restores the file's version of every entry
        _ok(c.delete(f"/v1/apps/{A}/users/{tomb['user']}/memories/{tomb['id']}"), 204)
    with dst.client(headers=KEY_A) as c:
        r = c.post(f"/v1/apps/{A}/import", content=body)
        assert r.status_code == 200
        third = _export(c).content
    # the re-deleted tombstone has a newer updated_at/deleted_at; the import restored the file's version
    assert third == body


def test_import_validates_every_line_before_writing(make_server: Callable[..., Served]) -> None:
    src = make_server(api_keys=AUTH_KEYS)
    with src.client(headers=KEY_A) as c:
        for i in range(3):
            _ok(c.post(f"/v1/apps/{A}/users/u{i}/memories", json={"text": f"memory number {i}"}), 201)
        good = _export(c).text.splitlines()
    assert len(good) == 3
    dst = make_server(api_keys=AUTH_KEYS)
    valid = json.loads(good[0])

    def bad(obj: Any) -> str:
        return obj if isinstance(obj, str) else json.dumps(obj)

    cases: list[tuple[str, str, str]] = [
        (bad({**valid, "text": ""}), "lines.3.text", "must not be empty"),
        (bad({**valid, "app": B}), "lines.3.app", "app-b"),
        (bad({**valid, "colour": "red"}), "lines.3.colour", "Extra inputs"),
        (bad({**valid, "id": "0" * 64}), "lines.3", "id does not match"),
        (bad({**valid, "user": "someone-else"}), "lines.3", "id does not match"),
        (bad({**valid, "created_at": "yesterday"}), "lines.3.created_at", ""),
        (bad({**valid, "kind": "rumour"}), "lines.3.kind", ""),
        (bad({**valid, "user": "bad\u0000user"}), "lines.3.user", "control"),
        (bad({k: v for k, v in valid.items() if k != "id"}), "lines.3.id", "required"),
        ('{"text": "x",', "lines.3", "malformed JSON"),
        ("[1, 2]", "lines.3", "JSON object"),
        ("[" * 100_000 + "]" * 100_000, "lines.3", "nested deeper"),
        ('{"text": ' + "1" * 10_000 + "}", "lines.3", "number longer than"),
        (bad({**valid, "topics": ["\ud800"]}), "lines.3.topics", "lone surrogate"),
        (good[1], "lines.3.id", "duplicate"),
    ]
    with dst.client(headers=KEY_A) as c:
        for third, field, text in cases:
            body = "\n".join([good[1], good[2], third, good[0]]).encode("utf-8", "surrogatepass")
            r = c.post(f"/v1/apps/{A}/import", content=body)
            assert r.status_code == 422, (field, r.text)
            err = r.json()
            assert err["error"] == "ValidationError" and err["field"].startswith(field), (field, err)
            assert err["message"].startswith("line 3") and text in err["message"], (field, err)
            assert _export(c).content == b"", field  # nothing was written
        r = c.post(f"/v1/apps/{A}/import", content=b"\xff\xfe\n")
        assert r.status_code == 422 and r.json()["field"] == "lines.1"
        # blank lines are skipped but keep the numbering; an empty body imports nothing
        r = c.post(f"/v1/apps/{A}/import", content=f"\n{good[0]}\n\n{{\n".encode())
        assert r.status_code == 422 and r.json()["field"] == "lines.4", r.text
        assert _ok(c.post(f"/v1/apps/{A}/import", content=b"")) == {
            "app": A, "entries": 0, "users": 0, "active": 0, "deleted": 0}
        assert _ok(c.post(f"/v1/apps/{A}/import", content="\r\n".join(good).encode()))["entries"] == 3


def test_backup_routes_need_the_apps_key(auth_server: Served) -> None:
    with auth_server.client() as c:
        assert c.get(f"/v1/apps/{A}/export").status_code == 401
        assert c.post(f"/v1/apps/{A}/import", content=b"").status_code == 401
        r = c.get(f"/v1/apps/{A}/export", headers=KEY_B)
        assert r.status_code == 403 and r.json()["field"] == "app"
        r = c.post(f"/v1/apps/{A}/import", content=b"{", headers=KEY_B)
        assert r.status_code == 403  # auth before the body is read
        assert c.get("/v1/apps/bad%01app/export", headers=KEY_A).status_code in (403, 422)


def test_import_has_its_own_body_limit(make_server: Callable[..., Served]) -> None:
    served = make_server(http=HttpSettings(max_body_bytes=MAX_BODY, max_import_bytes=4 * MAX_BODY))
    with served.client() as c:
        many = []
        for i in range(12):
            many.append(_ok(c.post(f"/v1/apps/{A}/users/big{i}/memories", json={"text": f"{i} " + "x" * 8000}), 201))
        big = "\n".join(json.dumps(e) for e in many).encode()
        assert MAX_BODY < len(big) < 4 * MAX_BODY
        assert _ok(c.post(f"/v1/apps/{A}/import", content=big))["entries"] == 12
        too_big = big * 4
        r = c.post(f"/v1/apps/{A}/import", content=too_big)
        assert r.status_code == 413 and r.json()["error"] == "PayloadTooLargeError"
        # every other route keeps the small limit
        r = c.post(f"/v1/apps/{A}/users/big/memories/search", content=big,
                   headers={"Content-Type": "application/json"})
        assert r.status_code == 413


def test_memctl_export_and_import(make_server: Callable[..., Served], tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    src = make_server(api_keys=AUTH_KEYS)
    with src.client(headers=KEY_A) as c:
        _populate(c)
        expected = _export(c).content
    out = tmp_path / "a.jsonl"
    monkeypatch.setenv("MEMCLUSTER_API_KEY", AUTH_KEYS[A])
    assert cli.main(["export", "--app", A, "--out", str(out), "--url", src.url]) == 0
    assert out.read_bytes() == expected
    assert not list(tmp_path.glob(".*partial"))
    err = capsys.readouterr().err
    assert f"exported {len(expected.splitlines())} entries of 4 users" in err and AUTH_KEYS[A] not in err

    dst = make_server(api_keys=AUTH_KEYS)
    monkeypatch.setenv("MEMCLUSTER_URL", dst.url)
    monkeypatch.delenv("MEMCLUSTER_API_KEY")
    assert cli.main(["import", "--app", A, "--in", str(out), "--api-key", AUTH_KEYS[A],
                     "--chunk-bytes", "2048"]) == 0  # several requests
    assert "imported 25 entries of 4 users" in capsys.readouterr().err
    with dst.client(headers=KEY_A) as c:
        assert _export(c).content == expected
    # failures: wrong key, a file of another app (checked locally, nothing sent), unreachable server
    assert cli.main(["export", "--app", A, "--out", str(tmp_path / "x.jsonl"), "--api-key", "wrong"]) == 1
    assert "401" in capsys.readouterr().err and not (tmp_path / "x.jsonl").exists()
    assert cli.main(["import", "--app", B, "--in", str(out), "--api-key", AUTH_KEYS[B]]) == 1
    assert "line 1, field app" in capsys.readouterr().err
    assert cli.main(["export", "--app", A, "--out", "-", "--url", "http://127.0.0.1:9",
                     "--api-key", AUTH_KEYS[A]]) == 1


class _FailingExport:
    """A LocalShardBackend whose export of one user fails (a shard dying mid-stream)."""

    def __init__(self, inner: Any, bad_user: str) -> None:
        self.inner, self.bad_user, self.settings = inner, bad_user, inner.settings

    async def call(self, key: Any, method: str, *args: Any) -> Any:
        if method == "export" and key.user == self.bad_user:
            raise ConnectionError("shard lost")
        return await self.inner.call(key, method, *args)

    async def call_shard(self, shard: int, method: str, *args: Any) -> Any:
        return await self.inner.call_shard(shard, method, *args)

    async def status(self) -> list[dict[str, Any]]:
        return list(await self.inner.status())


def test_a_failing_shard_cuts_the_export_short(make_server: Callable[..., Served], tmp_path: Path) -> None:
    src = make_server()
    with src.client() as c:
        for user in ("a1", "a2", "a3"):
            _ok(c.post(f"/v1/apps/{A}/users/{user}/memories", json={"text": f"{user} memory"}), 201)
    backend = src.backend  # type: ignore[attr-defined]
    broken = make_server(backend=_FailingExport(backend, "a3"), settings=backend.settings)
    with broken.client() as c, pytest.raises(httpx.RemoteProtocolError):
        c.get(f"/v1/apps/{A}/export").read()
    out = tmp_path / "cut.jsonl"
    out.write_text("previous backup\n")
    assert cli.main(["export", "--app", A, "--out", str(out), "--url", broken.url]) == 1
    assert out.read_text() == "previous backup\n" and not list(tmp_path.glob(".*partial"))


def test_shard_restore_refuses_entries_of_another_user(make_server: Callable[..., Served]) -> None:
    served = make_server()
    with served.client() as c:
        entry = _ok(c.post(f"/v1/apps/{A}/users/owner/memories", json={"text": "owned"}), 201)
    backend = served.backend  # type: ignore[attr-defined]
    other = make_key(A, "other")
    with pytest.raises(ValidationError) as err:
        backend.core(other).restore(other, [Entry.model_validate(entry)])
    assert err.value.field == "entries.0.user"
    owner = make_key(A, "owner")
    assert backend.core(owner).restore(owner, [entry]).value == 1  # dicts are fine too
