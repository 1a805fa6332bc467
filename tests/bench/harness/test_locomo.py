"""The benchmarks' one LoCoMo shape (bench/harness/locomo.py) on a small LoCoMo-format file, and the one
mapping of entry provenance to turn ids."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.locomo import Conversation, events, load, load_locomo, parse_evidence, session_of, turn_ids
from jobs.locomo import Sample

SAMPLE = {
    "sample_id": "conv-x",
    "conversation": {
        "speaker_a": "Ann", "speaker_b": "Bob",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [{"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted  a cat."},
                      {"speaker": "Bob", "dia_id": "D1:2", "text": "What is its name?"}],
        "session_2_date_time": "not a date",
        "session_2": [{"speaker": "Ann", "dia_id": "D2:1", "text": "Her name is Miso."}],
    },
    "qa": [{"question": "What is the cat called?", "answer": "Miso", "category": 4, "evidence": ["D2:1; D1:1"]},
           {"question": "  ", "answer": "-", "category": 1, "evidence": ["D1:1"]},
           {"question": "Who adopted a cat?", "adversarial_answer": "Bob", "category": 5, "evidence": "D"}],
}


@pytest.fixture
def path(tmp_path: Path) -> Path:
    out = tmp_path / "locomo.json"
    out.write_text(json.dumps([SAMPLE]))
    return out


def test_provenance_maps_to_turn_ids_bare_or_under_a_session() -> None:
    assert turn_ids(["D3:5", "session_3/D3:5", "session_12/D12:1"]) == ("D3:5", "D3:5", "D12:1")
    assert turn_ids([]) == ()
    assert turn_ids(["a/b/D1:1"]) == ("b/D1:1",)  # only up to the first "/"
    assert [session_of(t) for t in turn_ids(["session_3/D3:5", "D7:2"])] == [3, 7]


def test_a_conversation_is_the_jobs_parse_plus_its_questions(path: Path) -> None:
    [conv] = load(path)
    assert isinstance(conv, Conversation) and isinstance(conv.sample, Sample)
    assert conv.user == "conv-x" and conv.names == {"user": "Ann", "assistant": "Bob"}
    assert [s.key for s in conv.sessions] == ["session_1", "session_2"]
    assert [t.text for t in conv.sessions[0].turns] == ["I adopted a cat.", "What is its name?"]
    assert conv.sessions[1].time.isoformat() == "2023-05-09T13:56:00+00:00"  # unparsable: the day after
    evs = events(conv.sessions[0])
    assert [(e.id, e.role, e.content) for e in evs] == [("D1:1", "user", "I adopted a cat."),
                                                        ("D1:2", "assistant", "What is its name?")]
    assert [(q.question, q.category, q.evidence) for q in conv.questions] == [
        ("What is the cat called?", 4, ("D2:1", "D1:1")), ("Who adopted a cat?", 5, ())]
    assert conv.questions[1].answer == "Bob"
    assert parse_evidence(["D:11:26", "D9:1 D4:4", "D9:1"]) == ("D11:26", "D9:1", "D4:4")


def test_utterances_flatten_the_file_in_reading_order(path: Path) -> None:
    said, questions = load_locomo(path)
    assert [(u.conv, u.turn.id, u.speaker, u.text) for u in said] == [
        (0, "D1:1", "Ann", "Ann: I adopted a cat."), (0, "D1:2", "Bob", "Bob: What is its name?"),
        (0, "D2:1", "Ann", "Ann: Her name is Miso.")]
    assert said[0].when == said[1].when != said[2].when
    assert [q.question for q in questions] == ["What is the cat called?", "Who adopted a cat?"]
