"""TantivyIndex against real tantivy: analyzers, scope, filters, lenient queries, persistence."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memcore.model import Entry, Kind, UserKey
from memcore.ports import KeywordIndex
from memcore.stores.tantivy_index import TantivyIndex

ALICE = UserKey(app="app", user="alice")
BOB = UserKey(app="app", user="bob")
OTHER_APP = UserKey(app="other", user="alice")
T0 = datetime(2024, 1, 1, tzinfo=UTC)


def entry(
    eid: str,
    text: str,
    key: UserKey = ALICE,
    *,
    topics: list[str] | None = None,
    kind: Kind = Kind.FACT,
    event_time: datetime | None = None,
    deleted: bool = False,
) -> Entry:
    return Entry(
        id=eid,
        app=key.app,
        user=key.user,
        text=text,
        topics=topics or [],
        kind=kind,
        event_time=event_time,
        created_at=T0,
        updated_at=T0,
        deleted_at=T0 if deleted else None,
    )


def ids(hits: list[tuple[str, float]]) -> list[str]:
    return [h[0] for h in hits]


@pytest.fixture
def index(tmp_path: Path) -> Iterator[TantivyIndex]:
    idx = TantivyIndex(tmp_path / "kw")
    yield idx
    idx.close()


def test_implements_port(index: TantivyIndex) -> None:
    assert isinstance(index, KeywordIndex)


def test_english_stemming(index: TantivyIndex) -> None:
    index.upsert([entry("a", "I run every morning"), entry("b", "She runs marathons"), entry("c", "I like tea")])
    assert set(ids(index.search(ALICE, "running", limit=10))) == {"a", "b"}
    assert ids(index.search(ALICE, "Cafés", limit=10)) == []
    index.upsert([entry("d", "The cafe on the corner")])
    assert ids(index.search(ALICE, "Cafés", limit=10)) == ["d"]


def test_topics_are_searchable(index: TantivyIndex) -> None:
    index.upsert([entry("a", "Likes long walks", topics=["hobbies", "爱好"]), entry("b", "Works at a bank")])
    assert ids(index.search(ALICE, "hobby", limit=10)) == ["a"]
    assert ids(index.search(ALICE, "爱好", limit=10)) == ["a"]


def test_chinese_word_inside_sentence(index: TantivyIndex) -> None:
    index.upsert(
        [
            entry("a", "我喜欢在周末去爬山和徒步"),
            entry("b", "我用Go 1.21写服务"),
            entry("c", "我喜欢看电影"),
        ]
    )
    assert ids(index.search(ALICE, "爬山", limit=10)) == ["a"]
    assert ids(index.search(ALICE, "周末爬山", limit=10))[0] == "a"
    assert ids(index.search(ALICE, "Go", limit=10)) == ["b"]
    assert ids(index.search(ALICE, "1.21", limit=10)) == ["b"]
    assert ids(index.search(ALICE, "服务", limit=10)) == ["b"]
    assert ids(index.search(ALICE, "go服务", limit=10)) == ["b"]
    assert set(ids(index.search(ALICE, "喜欢", limit=10))) == {"a", "c"}
    assert ids(index.search(ALICE, "山", limit=10)) == ["a"]


def test_scope_isolation_between_users_and_apps(index: TantivyIndex) -> None:
    index.upsert(
        [
            entry("a1", "loves green tea", ALICE),
            entry("b1", "loves green tea", BOB),
            entry("o1", "loves green tea", OTHER_APP),
        ]
    )
    assert ids(index.search(ALICE, "green tea", limit=10)) == ["a1"]
    assert ids(index.search(BOB, "green tea", limit=10)) == ["b1"]
    assert ids(index.search(OTHER_APP, "green tea", limit=10)) == ["o1"]
    assert index.search(UserKey(app="app", user="carol"), "green tea", limit=10) == []
    # a query that looks like a field filter cannot escape the scope
    assert ids(index.search(ALICE, "user:bob app:other tea", limit=10)) == ["a1"]


def test_kind_and_time_filters(index: TantivyIndex) -> None:
    index.upsert(
        [
            entry("f", "went hiking", kind=Kind.FACT),
            entry("e1", "went hiking in the alps", kind=Kind.EPISODE, event_time=datetime(2024, 3, 1, tzinfo=UTC)),
            entry("e2", "went hiking in wales", kind=Kind.EPISODE, event_time=datetime(2024, 6, 1, tzinfo=UTC)),
        ]
    )
    assert set(ids(index.search(ALICE, "hiking", limit=10))) == {"f", "e1", "e2"}
    assert ids(index.search(ALICE, "hiking", limit=10, kind=Kind.FACT)) == ["f"]
    assert set(ids(index.search(ALICE, "hiking", limit=10, kind=Kind.EPISODE))) == {"e1", "e2"}
    may = datetime(2024, 5, 1, tzinfo=UTC)
    assert ids(index.search(ALICE, "hiking", limit=10, time_from=may)) == ["e2"]
    assert ids(index.search(ALICE, "hiking", limit=10, time_to=may)) == ["e1"]
    both = index.search(ALICE, "hiking", limit=10, time_from=datetime(2024, 1, 1), time_to=datetime(2024, 12, 31))
    assert set(ids(both)) == {"e1", "e2"}  # naive datetimes are UTC; no event time -> excluded
    assert index.search(ALICE, "hiking", limit=10, kind=Kind.FACT, time_from=may) == []


@pytest.mark.parametrize(
    "query",
    [
        "C++",
        "foo:",
        '"unbalanced quote',
        "AND OR NOT",
        "(",
        ")",
        "*",
        "field:value",
        "title:x",
        "text:tea^3",
        "tea~2",
        "[a TO z]",
        "-tea +",
        "\\",
        "🍵🙂",
        "",
        "   \t\n ",
        "tea " * 5000,
        "爬山" * 3000,
        "\x00\x01",
    ],
)
def test_lenient_queries_never_raise(index: TantivyIndex, query: str) -> None:
    index.upsert([entry("a", "I drink green tea with C++ programmers"), entry("b", "我喜欢爬山")])
    hits = index.search(ALICE, query, limit=5)
    assert isinstance(hits, list)
    assert len(hits) <= 5


def test_empty_query_and_limits(index: TantivyIndex) -> None:
    index.upsert([entry(f"e{i}", f"tea number {i}") for i in range(20)])
    assert index.search(ALICE, "", limit=10) == []
    assert index.search(ALICE, "   ", limit=10) == []
    assert index.search(ALICE, "tea", limit=0) == []
    assert len(index.search(ALICE, "tea", limit=7)) == 7
    assert ids(index.search(ALICE, "C++ tea", limit=1)) != []


def test_upsert_replaces_by_id(index: TantivyIndex) -> None:
    index.upsert([entry("a", "likes coffee")])
    index.upsert([entry("a", "likes tea")])
    assert index.count() == 1
    assert index.search(ALICE, "coffee", limit=10) == []
    assert ids(index.search(ALICE, "tea", limit=10)) == ["a"]
    index.upsert([entry("a", "likes juice"), entry("a", "likes water")])  # last one wins
    assert index.count() == 1
    assert ids(index.search(ALICE, "water", limit=10)) == ["a"]


def test_tombstoned_entry_is_removed(index: TantivyIndex) -> None:
    index.upsert([entry("a", "likes tea"), entry("b", "likes tea too")])
    index.upsert([entry("a", "likes tea", deleted=True), entry("c", "tea again", deleted=True)])
    assert ids(index.search(ALICE, "tea", limit=10)) == ["b"]
    assert index.count() == 1


def test_delete_and_delete_user(index: TantivyIndex) -> None:
    index.upsert([entry("a", "tea"), entry("b", "tea"), entry("c", "tea", BOB), entry("d", "tea", OTHER_APP)])
    index.delete(["a", "unknown"])
    assert ids(index.search(ALICE, "tea", limit=10)) == ["b"]
    index.delete([])
    index.delete_user(ALICE)
    assert index.search(ALICE, "tea", limit=10) == []
    assert ids(index.search(BOB, "tea", limit=10)) == ["c"]
    assert ids(index.search(OTHER_APP, "tea", limit=10)) == ["d"]
    assert index.count() == 2


def test_rebuild_counts_active_entries(index: TantivyIndex) -> None:
    index.upsert([entry("old", "stale coffee")])
    entries = [entry(f"e{i}", f"tea {i}", deleted=i % 4 == 0) for i in range(10)]
    assert index.rebuild(iter(entries)) == 7
    assert index.count() == 7
    assert index.search(ALICE, "coffee", limit=10) == []
    assert len(index.search(ALICE, "tea", limit=100)) == 7
    assert index.rebuild(iter([])) == 0
    assert index.count() == 0


def test_persistence_across_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "kw"
    first = TantivyIndex(path)
    first.upsert([entry("a", "我喜欢在周末去爬山", topics=["hiking"]), entry("b", "runs a bakery")])
    first.close()
    first.close()  # idempotent
    second = TantivyIndex(path)
    try:
        assert second.count() == 2
        assert ids(second.search(ALICE, "爬山", limit=10)) == ["a"]
        assert ids(second.search(ALICE, "running", limit=10)) == ["b"]
        second.upsert([entry("c", "bakes bread")])
        assert second.count() == 3
    finally:
        second.close()


def test_in_memory_index() -> None:
    idx = TantivyIndex(None)
    try:
        idx.upsert([entry("a", "tea")])
        assert ids(idx.search(ALICE, "tea", limit=10)) == ["a"]
    finally:
        idx.close()


def test_bm25_ranking(index: TantivyIndex) -> None:
    index.upsert(
        [
            entry("one", "I like green vegetables and fresh bread"),
            entry("two", "green tea in the morning"),
            entry("three", "green tea with jasmine flowers, green tea forever"),
            entry("none", "coffee in the afternoon"),
        ]
    )
    hits = index.search(ALICE, "green jasmine tea", limit=10)
    assert ids(hits)[0] == "three"
    assert set(ids(hits)) == {"one", "two", "three"}
    scores = [s for _, s in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)


def test_concurrent_searches_during_writes() -> None:
    index = TantivyIndex(None)
    index.upsert([entry(f"e{i}", f"tea {i}") for i in range(50)])
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                assert len(index.search(ALICE, "tea", limit=5)) == 5
        except BaseException as exc:  # noqa: BLE001 - collected and re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(4)]
    for t in threads:
        t.start()
    for i in range(20):
        index.upsert([entry(f"n{i}", f"tea new {i}")])
    for t in threads:
        t.join()
    assert errors == []
    assert index.count() == 70
    index.close()


def test_closed_index_raises_store_error(tmp_path: Path) -> None:
    from memcore.errors import StoreError

    idx = TantivyIndex(tmp_path / "kw")
    idx.close()
    with pytest.raises(StoreError):
        idx.search(ALICE, "tea", limit=5)
    with pytest.raises(StoreError):
        idx.upsert([entry("a", "tea")])


def test_failed_rebuild_keeps_the_old_index(index: TantivyIndex) -> None:
    index.upsert([entry("a", "tea")])

    class SourceFailed(Exception):
        pass

    def broken() -> Iterator[Entry]:
        yield entry("b", "coffee")
        raise SourceFailed("vector store went away")

    with pytest.raises(SourceFailed):
        index.rebuild(broken())
    index.upsert([entry("c", "juice")])  # must not commit the half-done rebuild
    assert index.count() == 2
    assert ids(index.search(ALICE, "tea", limit=10)) == ["a"]
    assert index.search(ALICE, "coffee", limit=10) == []


def test_second_writer_on_same_path_is_a_store_error(tmp_path: Path) -> None:
    from memcore.errors import StoreError

    first = TantivyIndex(tmp_path / "kw")
    try:
        with pytest.raises(StoreError):
            TantivyIndex(tmp_path / "kw")
    finally:
        first.close()


def test_index_with_another_schema_is_recreated_empty(tmp_path: Path) -> None:
    import tantivy

    path = tmp_path / "kw"
    path.mkdir()
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("legacy", stored=True)
    old = tantivy.Index(builder.build(), str(path))
    writer = old.writer(15_000_000, 1)
    writer.add_document(tantivy.Document(legacy="x"))
    writer.commit()
    writer.wait_merging_threads()
    del writer, old
    idx = TantivyIndex(path)
    try:
        assert idx.count() == 0
        idx.upsert([entry("a", "tea")])
        assert ids(idx.search(ALICE, "tea", limit=10)) == ["a"]
    finally:
        idx.close()


# ------------------------------------------------------------------ deferred commits
def test_deferred_commit_is_read_your_writes(tmp_path: Path) -> None:
    idx = TantivyIndex(tmp_path / "kw", commit_interval_s=30.0)
    try:
        idx.upsert([entry("d1", "deferred commits batch writes")])
        assert (tmp_path / "kw" / ".staged").exists()  # staged, not yet committed
        assert [i for i, _ in idx.search(ALICE, "deferred", limit=5)] == ["d1"]  # the search commits first
        assert not (tmp_path / "kw" / ".staged").exists()
        idx.delete(["d1"])
        assert idx.count() == 0
    finally:
        idx.close()


def test_deferred_commit_happens_in_the_background(tmp_path: Path) -> None:
    import time

    idx = TantivyIndex(tmp_path / "kw", commit_interval_s=0.05)
    try:
        idx.upsert([entry("b1", "background commit")])
        deadline = time.monotonic() + 5
        while (tmp_path / "kw" / ".staged").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not (tmp_path / "kw" / ".staged").exists()
    finally:
        idx.close()
    again = TantivyIndex(tmp_path / "kw")
    try:
        assert again.count() == 1 and not again.needs_rebuild
    finally:
        again.close()


def test_crash_with_staged_writes_asks_for_a_rebuild(tmp_path: Path) -> None:
    import subprocess
    import sys

    code = (
        "import os, sys; from datetime import datetime, UTC\n"
        "from memcore.model import Entry\n"
        "from memcore.stores.tantivy_index import TantivyIndex\n"
        "idx = TantivyIndex(sys.argv[1], commit_interval_s=60)\n"
        "now = datetime.now(UTC)\n"
        "idx.upsert([Entry(id='x', app='app', user='alice', text='lost in a crash', created_at=now, updated_at=now)])\n"
        "os._exit(0)\n"
    )
    subprocess.run([sys.executable, "-c", code, str(tmp_path / "kw")], check=True, cwd=Path(__file__).parents[3])
    idx = TantivyIndex(tmp_path / "kw")
    try:
        assert idx.needs_rebuild
        assert idx.count() == 0
    finally:
        idx.close()
