from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor, split_text
from memcore.fields import MAX_TEXT_BYTES
from memcore.model import Kind, Source, UserKey
from memcore.policy.apply import apply_operations
from memcore.service import MemoryService

T0 = datetime(2025, 5, 30, 9, 0, tzinfo=UTC)
KEY = UserKey(app="app", user="u1")


@pytest.fixture
def service(make_service: Callable[..., MemoryService]) -> MemoryService:
    """This logic does not depend on the backend: the in-memory qdrant-client store is enough here
    (the seed scenarios and apply tests run on both backends)."""
    return make_service("server")


def ev(i: int, role: str, content: str, **kw: Any) -> Event:
    return Event(id=f"e{i}", role=role, content=content, timestamp=T0 + timedelta(minutes=i), **kw)  # type: ignore[arg-type]


CONVERSATION = [
    ev(0, "assistant", "Welcome back!"),
    ev(1, "user", "I finished seven short stories."),
    ev(2, "assistant", "Congratulations!"),
    ev(3, "assistant", "Want to share one?"),
    ev(4, "tool", "ignored tool output"),
    ev(5, "user", "Maybe later."),
]


def test_turn_granularity_one_episode_per_message() -> None:
    result = VerbatimExtractor("turn").extract(CONVERSATION)
    mems = [op.memory for op in result.operations if op.memory]
    assert [op.type for op in result.operations] == ["add"] * 5
    assert [m.text for m in mems] == [
        "Assistant: Welcome back!", "User: I finished seven short stories.", "Assistant: Congratulations!",
        "Assistant: Want to share one?", "User: Maybe later.",
    ]
    assert [m.provenance for m in mems] == [["e0"], ["e1"], ["e2"], ["e3"], ["e5"]]
    assert [m.source for m in mems] == [Source.ASSISTANT, Source.USER, Source.ASSISTANT, Source.ASSISTANT, Source.USER]
    assert all(m.kind is Kind.EPISODE for m in mems)
    assert mems[1].event_time == T0 + timedelta(minutes=1)
    assert result.rejected == []


def test_round_granularity_user_turn_plus_following_assistant_turns() -> None:
    mems = [op.memory for op in VerbatimExtractor("round").extract(CONVERSATION).operations if op.memory]
    assert [m.provenance for m in mems] == [["e0"], ["e1", "e2", "e3"], ["e5"]]
    assert mems[1].text.splitlines() == [
        "User: I finished seven short stories.", "Assistant: Congratulations!", "Assistant: Want to share one?"]
    assert mems[1].event_time == T0 + timedelta(minutes=1)
    assert [m.source for m in mems] == [Source.ASSISTANT, Source.USER, Source.USER]


def test_session_granularity_and_speaker_names() -> None:
    extractor = VerbatimExtractor("session", names={"user": "Caroline", "assistant": "Melanie"})
    (op,) = VerbatimExtractor("session").extract(CONVERSATION).operations
    assert op.memory is not None and op.memory.provenance == ["e0", "e1", "e2", "e3", "e5"]
    assert op.memory.event_time == T0
    (named,) = extractor.extract(CONVERSATION).operations
    assert named.memory is not None
    assert named.memory.text.splitlines()[:2] == ["Melanie: Welcome back!", "Caroline: I finished seven short stories."]
    assert VerbatimExtractor("session").extract([]).operations == []


def test_long_text_is_split_under_the_byte_limit_with_provenance() -> None:
    big = " ".join(f"word{i}" for i in range(3000))  # ~26 KB
    events = [ev(1, "user", "short question"), ev(2, "assistant", big), ev(3, "user", "thanks")]
    for granularity in ("turn", "round", "session"):
        mems = [op.memory for op in VerbatimExtractor(granularity).extract(events).operations if op.memory]  # type: ignore[arg-type]
        assert all(len(m.text.encode()) <= MAX_TEXT_BYTES for m in mems)
        assert len(mems) >= 4
        joined = " ".join(m.text for m in mems)
        assert "word0 " in joined and "word2999" in joined
        assert {p for m in mems for p in m.provenance} == {"e1", "e2", "e3"}
        assert all(m.text.startswith(("User: ", "Assistant: ")) for m in mems)
    # in session granularity, a part made only of the assistant's text is assistant-sourced
    session = [op.memory for op in VerbatimExtractor("session").extract(events).operations if op.memory]
    assert session[0].provenance[0] == "e1" and session[1].source is Source.ASSISTANT


def test_split_text() -> None:
    assert split_text("a b c", 100) == ["a b c"]
    assert split_text("aaaa bbbb cccc", 9) == ["aaaa bbbb", "cccc"]
    assert split_text("x" * 10, 4) == ["xxxx", "xxxx", "xx"]
    pieces = split_text("é" * 10, 5)  # 2-byte characters never cut in half
    assert "".join(pieces) == "é" * 10 and all(len(p.encode()) <= 5 for p in pieces)


def test_window_granularity_each_turn_with_its_neighbours() -> None:
    mems = [op.memory for op in VerbatimExtractor("window", window=1).extract(CONVERSATION).operations if op.memory]
    assert [m.provenance for m in mems] == [["e0", "e1"], ["e0", "e1", "e2"], ["e1", "e2", "e3"], ["e2", "e3", "e5"],
                                           ["e3", "e5"]]  # the tool event is not a turn
    assert mems[1].text == ("Assistant: Welcome back!\nUser: I finished seven short stories.\n"
                            "Assistant: Congratulations!")
    assert mems[1].event_time == T0 and mems[2].event_time == T0 + timedelta(minutes=1)  # its first turn's time
    assert mems[0].source == Source.USER and all(m.kind == Kind.EPISODE for m in mems)
    wide = [op.memory for op in VerbatimExtractor("window", window=2).extract(CONVERSATION).operations if op.memory]
    assert wide[2].provenance == ["e0", "e1", "e2", "e3", "e5"]
    zero = [op.memory for op in VerbatimExtractor("window", window=0).extract(CONVERSATION).operations if op.memory]
    turn = [op.memory for op in VerbatimExtractor("turn").extract(CONVERSATION).operations if op.memory]
    assert [m.text for m in zero] == [m.text for m in turn]  # window 0 is turn granularity
    with pytest.raises(ValueError, match="window"):
        VerbatimExtractor("window", window=-1)


def test_short_session_windows_are_one_entry(service: MemoryService) -> None:
    events = [ev(0, "user", "Hi"), ev(1, "assistant", "Hello!")]
    ops = VerbatimExtractor("window", window=1).extract(events).operations
    assert len(ops) == 2 and ops[0].memory == ops[1].memory
    apply_operations(service, KEY, ops, "append_only")
    assert [e.provenance for e in service.read(KEY)] == [["e0", "e1"]]


def test_unknown_granularity() -> None:
    with pytest.raises(ValueError, match="granularity"):
        VerbatimExtractor("paragraph")  # type: ignore[arg-type]


def test_verbatim_entries_are_stored_and_idempotent(service: MemoryService) -> None:
    ops = VerbatimExtractor("turn").extract(CONVERSATION).operations
    first = apply_operations(service, KEY, ops, "append_only")
    assert [r.status for r in first] == ["applied"] * 5
    again = apply_operations(service, KEY, ops, "append_only")
    assert [r.status for r in again] == ["skipped"] * 5
    stored = {e.text: e for e in service.read(KEY)}
    assert stored["User: Maybe later."].provenance == ["e5"]
    assert stored["User: Maybe later."].event_time == T0 + timedelta(minutes=5)
