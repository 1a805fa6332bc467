from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

from memcore.ids import memory_id, point_id, shard_of
from memcore.model import Kind, Memory, UserKey

KEY = UserKey(app="app", user="u1")


def test_id_ignores_topics_case_and_whitespace() -> None:
    a = memory_id(KEY, Memory(text="Likes  Tea", topics=["drinks"]))
    b = memory_id(KEY, Memory(text="likes tea", topics=["food", "x"]))
    assert a == b and len(a) == 64


def test_id_depends_on_scope_and_episodic_metadata() -> None:
    base = Memory(text="went hiking", kind=Kind.EPISODE, event_time=datetime(2024, 5, 1, tzinfo=UTC))
    ids = {
        memory_id(KEY, base),
        memory_id(UserKey(app="app", user="u2"), base),
        memory_id(UserKey(app="other", user="u1"), base),
        memory_id(KEY, base.model_copy(update={"kind": Kind.FACT})),
        memory_id(KEY, base.model_copy(update={"location": "Alps"})),
        memory_id(KEY, base.model_copy(update={"participants": ["Bob"]})),
        memory_id(KEY, base.model_copy(update={"event_time": datetime(2024, 5, 2, tzinfo=UTC)})),
    }
    assert len(ids) == 7


def test_id_canonicalises_time_zone_and_participant_order() -> None:
    t = datetime(2024, 5, 1, 12, tzinfo=UTC)
    t_plus2 = t.astimezone(timezone(timedelta(hours=2)))
    a = Memory(text="x", kind=Kind.EPISODE, event_time=t, participants=["Bob", "alice"])
    b = Memory(text="x", kind=Kind.EPISODE, event_time=t_plus2, participants=["Alice", "bob"])
    assert memory_id(KEY, a) == memory_id(KEY, b)


def test_shard_of_is_stable_across_processes() -> None:
    keys = [UserKey(app="a", user=f"user-{i}") for i in range(200)]
    here = [shard_of(k, 7) for k in keys]
    assert set(here) == set(range(7))
    code = (
        "from memcore.ids import shard_of; from memcore.model import UserKey;"
        "print([shard_of(UserKey(app='a', user=f'user-{i}'), 7) for i in range(200)])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONHASHSEED": "123", "PATH": ""})
    assert out.stdout.strip() == str(here)


def test_point_id_is_uuid_shaped() -> None:
    pid = point_id("ab" * 32)
    assert len(pid) == 36 and pid.count("-") == 4
