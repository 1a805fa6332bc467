"""LoCoMo in the benchmarks: one shape, the one of :mod:`jobs.locomo`, plus the QA that scores retrieval.

LoCoMo-10 (``../shared/data/locomo/locomo10.json``) is CC BY-NC 4.0: evaluation use only.

A :class:`Conversation` is a sample as :func:`jobs.locomo.parse_sample` reads it (its mapping,
issue 5: one user per ``sample_id``, speaker A the ``user`` role, one session per ``session_<n>``,
event ids the dia ids ``D3:5``, timestamps from the session's date-time) and its questions. The
backfill job reads the same file through :func:`jobs.locomo.rows`, so both ingest paths of the
retrieval benchmark see the same turns. ``captions=True`` appends a shared image's caption to the
turn text (off by default: the peers index text only).

Evidence ids are parsed tolerantly (:func:`parse_evidence`): ``"D8:6; D9:17"`` and ``"D9:1 D4:4"``
give several ids, ``"D:11:26"`` gives ``D11:26``, ``"D"`` gives none. An entry's provenance maps
back to turn ids through :func:`turn_ids`, the one place that knows how an event is referred to.

:func:`load_locomo` flattens the default file into :class:`Utterance` views (every turn in reading
order, with its conversation, session and speaker) for the synthetic datasets of
:mod:`bench.harness.datasets`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.harness.report import ROOT
from jobs.locomo import Sample, Session, Turn, parse_dia_id, parse_dia_ids, parse_sample
from memcore.extraction.events import Event
from memcore.provenance import parse_event_ref

APP = "locomo"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop", 5: "adversarial"}
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"
"""LoCoMo-10, where the workspace keeps it."""


@dataclass(frozen=True)
class QA:
    question: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # normalised dia ids ("D3:5"), in order, unique


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo conversation (one user): the sample as :mod:`jobs.locomo` parses it, and its questions."""

    sample: Sample
    questions: list[QA]

    @property
    def user(self) -> str:
        return self.sample.user

    @property
    def sessions(self) -> list[Session]:
        return self.sample.sessions

    @property
    def names(self) -> dict[str, str]:
        """Role → speaker name, for the verbatim extractor's ``"Speaker: text"`` lines."""
        return {"user": self.sample.speaker_a, "assistant": self.sample.speaker_b}


def line(speaker: str, text: str) -> str:
    """``"Speaker: text"``: a turn as the verbatim extractor writes it."""
    return f"{speaker}: {text}"


def events(session: Session) -> list[Event]:
    """The session's turns as the events the backfill job archives and extracts."""
    return [Event(id=t.id, role=t.role, content=t.text, timestamp=t.timestamp)  # type: ignore[arg-type]
            for t in session.turns]


def parse_evidence(values: Iterable[Any] | str | None) -> tuple[str, ...]:
    """Every dia id found in ``values`` as ``"D<s>:<t>"``, in order, without repeats."""
    if values is None:
        return ()
    if isinstance(values, str):
        values = [values]
    found = (f"D{s}:{t}" for v in values for s, t in parse_dia_ids(str(v)))
    return tuple(dict.fromkeys(found))


def session_of(turn_id: str) -> int | None:
    parsed = parse_dia_id(turn_id)
    return parsed[0] if parsed else None


def turn_ids(provenance: Iterable[str]) -> tuple[str, ...]:
    """The LoCoMo turn ids (``"D3:5"``) an entry's provenance refers to, in order.

    A reference is a bare event id (``"D3:5"``) or ``"<session>/<event id>"`` (``"session_3/D3:5"``):
    the event id of :func:`memcore.provenance.parse_event_ref` (LoCoMo's dia ids hold no ``/``).
    """
    return tuple(parse_event_ref(ref).event_id for ref in provenance)


def convert(sample: dict[str, Any], index: int = 0, *, captions: bool = False) -> Conversation:
    """One LoCoMo sample → a :class:`Conversation`: the sessions as :mod:`jobs.locomo` parses them, the QA."""
    questions = []
    for qa in sample.get("qa", []) or []:
        q = " ".join(str(qa.get("question", "")).split())
        if not q:
            continue
        answer = qa.get("answer", qa.get("adversarial_answer", ""))
        questions.append(QA(q, str(answer), int(qa.get("category", 0) or 0), parse_evidence(qa.get("evidence"))))
    return Conversation(parse_sample(sample, index, captions=captions), questions)


def load(path: str | Path, *, limit: int | None = None, captions: bool = False) -> list[Conversation]:
    """Every conversation of a LoCoMo-format JSON file (a list of samples), the first ``limit`` only if given."""
    data = json.loads(Path(path).read_text())
    if isinstance(data, dict):
        data = [data]
    samples = data[:limit] if limit else data
    return [convert(sample, i, captions=captions) for i, sample in enumerate(samples)]


@dataclass(frozen=True)
class Utterance:
    """One turn of a loaded file in reading order: a view of the :class:`Conversation` it belongs to."""

    conv: int  # the conversation's index in the file
    session: Session
    turn: Turn
    speaker: str

    @property
    def text(self) -> str:
        """``"Speaker: text"``."""
        return line(self.speaker, self.turn.text)

    @property
    def when(self) -> datetime:
        """The session's date-time."""
        return self.session.time


def load_locomo(path: Path = LOCOMO) -> tuple[list[Utterance], list[QA]]:
    """Every dialogue turn (conversation, session, turn order) and every question of the file."""
    utterances: list[Utterance] = []
    questions: list[QA] = []
    for ci, conv in enumerate(load(path)):
        for session in conv.sessions:
            utterances += [Utterance(ci, session, t, conv.names[t.role]) for t in session.turns]
        questions += conv.questions
    return utterances, questions
