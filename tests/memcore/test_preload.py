from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from memcore import preload
from memcore.model import Entry, InjectionMode, UserKey
from memcore.search_model import SearchHit, SearchOptions
from memcore.service import MemoryService

A = UserKey(app="app", user="alice")


def test_budget_zero_is_off(service: MemoryService) -> None:
    service.add(A, {"text": "x"})
    r = preload.preload(service, A, 0, "hello")
    assert r.entries == [] and r.text == "" and r.strategy == "off"


def test_small_set_injects_all(service: MemoryService) -> None:
    for t in ("likes tea", "has a cat", "lives in Oslo"):
        service.add(A, {"text": t})
    r = preload.preload(service, A, 3, "anything")
    assert r.strategy == "all" and len(r.entries) == 3
    assert "likes tea" in r.text and r.text.startswith(preload.DEFAULT_PLAYBOOK)
    assert preload.preload(service, A, -1, "").strategy == "all"


def test_large_set_searches_the_message(service: MemoryService) -> None:
    for i in range(10):
        service.add(A, {"text": f"filler memory {i} about gardening"})
    cat = service.add(A, {"text": "The user's cat is named Miso"}).id
    r = preload.preload(service, A, 3, "What is my cat called?")
    assert r.strategy == "search" and len(r.entries) <= 3 and r.entries[0].id == cat


def test_empty_query_or_no_hit_falls_back_to_newest(service: MemoryService) -> None:
    ids = [service.add(A, {"text": f"memory {i}"}).id for i in range(5)]
    r = preload.preload(service, A, 2, "   ")
    assert r.strategy == "recent" and [e.id for e in r.entries] == [ids[4], ids[3]]


def test_playbook_override_and_user_mode(service: MemoryService) -> None:
    service.add(A, {"text": "likes tea"})
    r = preload.preload(service, A, 5, "", mode=InjectionMode.USER, playbook="Custom rules.")
    assert r.text.startswith("Custom rules.") and preload.DEFAULT_PLAYBOOK not in r.text
    assert r.mode is InjectionMode.USER
    assert preload.preload(service, A, 5, "", playbook="").text.startswith(preload.DEFAULT_PLAYBOOK)


class FailingReader:
    """A reader whose storage is down: reads raise, so the probe fails."""

    def __init__(self, search_fails: bool = True, read_fails: bool = True) -> None:
        self.read_fails = read_fails
        self.search_fails = search_fails
        now = datetime(2025, 1, 1, tzinfo=UTC)
        self.entries = [Entry(id=f"e{i}", app="app", user="alice", text=f"m{i}", created_at=now, updated_at=now)
                        for i in range(5)]

    def read(self, key: UserKey, limit: int | None = None, *, topics: Any = None, topics_match: str = "any",
             ) -> list[Entry]:
        if self.read_fails:
            raise OSError("disk gone")
        return self.entries[:limit]

    def search(self, key: UserKey, options: SearchOptions) -> list[SearchHit]:
        if self.search_fails:
            raise OSError("index gone")
        return []


def test_failed_probe_injects_nothing_and_does_not_raise() -> None:
    r = preload.preload(FailingReader(), A, 3, "hello")
    assert r.strategy == "failed" and r.entries == [] and r.text == ""


def test_failed_search_falls_back_to_newest_n() -> None:
    r = preload.preload(FailingReader(read_fails=False), A, 3, "hello")
    assert r.strategy == "recent" and [e.id for e in r.entries] == ["e0", "e1", "e2"]


def test_topics_narrow_every_preload_step(service: MemoryService) -> None:
    trips = [service.add(A, {"text": f"Trip {i}: a week hiking in Norway", "topics": ["travel"]}) for i in range(3)]
    for i in range(6):
        service.add(A, {"text": f"Note {i}: hiking boots and Norway maps on the desk", "topics": ["home"]})
    both = service.add(A, {"text": "Packed the Norway hiking bag at home", "topics": ["travel", "home"]})
    everything = preload.preload(service, A, -1, "", topics=["travel"])
    assert everything.strategy == "all" and {e.id for e in everything.entries} == {e.id for e in [*trips, both]}
    assert preload.preload(service, A, 10, "", topics=["travel"]).strategy == "all"  # 4 <= 10: all of them
    searched = preload.preload(service, A, 2, "hiking in Norway", topics=["travel"])
    assert searched.strategy == "search" and len(searched.entries) == 2
    assert all("travel" in e.topics for e in searched.entries)
    recent = preload.preload(service, A, 2, "", topics=["travel"])
    assert recent.strategy == "recent" and all("travel" in e.topics for e in recent.entries)
    only_both = preload.preload(service, A, 5, "bag", topics=["travel", "home"], topics_match="all")
    assert [e.id for e in only_both.entries] == [both.id]


def test_a_relevance_floor_lets_an_off_topic_message_inject_nothing(service: MemoryService) -> None:
    cat = service.add(A, {"text": "The user's cat is named Miso"}).id
    service.add(A, {"text": "The user likes green tea"})
    assert preload.preload(service, A, 10, "quantum chromodynamics lecture").strategy == "all"  # no floor: as before
    off = preload.preload(service, A, 10, "quantum chromodynamics lecture", min_relevance=0.2)
    assert off.strategy == "none" and off.entries == [] and off.text == ""
    on = preload.preload(service, A, 10, "what is my cat named", min_relevance=0.2)
    assert on.strategy == "search" and on.entries[0].id == cat  # the floor judges the search: its hits as they are
    hits = service.search(A, {"query": "what is my cat named", "deduplicate": True})
    assert [e.id for e in on.entries] == [h.entry.id for h in hits]
    assert preload.preload(service, A, 10, "", min_relevance=0.2).strategy == "all"  # no message: the budget rules
    assert preload.preload(service, A, 0, "cat", min_relevance=0.2).strategy == "off"
    assert preload.preload(service, A, -1, "my cat", min_relevance=0.2).entries[0].id == cat
    assert preload.preload(service, A, -1, "quantum chromodynamics", min_relevance=0.2).strategy == "none"


def test_a_failed_search_with_a_floor_falls_back_to_the_budget_rules() -> None:
    r = preload.preload(FailingReader(read_fails=False), A, 3, "hello", min_relevance=0.3)
    assert r.strategy == "recent" and [e.id for e in r.entries] == ["e0", "e1", "e2"]
