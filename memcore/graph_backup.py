"""The backup format of one app's knowledge graphs and diaries: JSON Lines, one record per line, beside the
entries' backup (:mod:`memcore.backup`, whose format is unchanged).

Each line is ``{"record": "entity" | "fact" | "diary", "app", "user", ...}`` with every stored field of an
:class:`memcore.graph.Entity`, a :class:`memcore.graph.Fact` version (retired versions too: the history is
exported) or a :class:`memcore.graph.DiaryEntry`. Order is deterministic (user, then type, then key / record
time / id), so an export restored into an empty service and exported again gives the same bytes.
A fact's ``fact_id`` must be the content id of its scope and triple (:func:`memcore.graph.fact_id`): a
foreign id could otherwise name a fact of another user. :func:`parse_lines` validates a whole file before
anything is written and raises :class:`ValidationError` naming ``lines.<n>[.<field>]``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict

from memcore.archive_ports import DiaryRepository, GraphRepository
from memcore.errors import ValidationError
from memcore.fields import AppId, UserId, now_utc
from memcore.graph import DiaryEntry, Entity, Fact, fact_id
from memcore.model import UserKey
from memcore.validation import first_error

RecordType = Literal["entity", "fact", "diary"]
_MODELS: dict[str, type[BaseModel]] = {"entity": Entity, "fact": Fact, "diary": DiaryEntry}


class _Scope(BaseModel):
    model_config = ConfigDict(extra="allow")

    record: RecordType
    app: AppId
    user: UserId


class UserGraph(BaseModel):
    """Everything of one user's graph and diary (what one restore call writes)."""

    entities: list[Entity] = []
    facts: list[Fact] = []
    diary: list[DiaryEntry] = []


def export_user(graph: GraphRepository, diary: DiaryRepository, key: UserKey) -> UserGraph:
    entries, _ = diary.read(key, None, limit=None)
    return UserGraph(entities=graph.entities(key), facts=graph.facts(key),
                     diary=sorted(entries, key=lambda e: (e.written_at, e.id)))


def restore_user(graph: GraphRepository, diary: DiaryRepository, key: UserKey, data: UserGraph) -> int:
    """Write a user's backed-up graph as it is (versions already stored are kept); returns the records given."""
    for f in data.facts:
        _check_fact(key, f)
    graph.write(key, at=now_utc(), add=data.facts, entities=data.entities)  # retires nothing: ``at`` is unused
    diary.write(key, data.diary)
    return len(data.entities) + len(data.facts) + len(data.diary)


def _check_fact(key: UserKey, f: Fact) -> None:
    if f.fact_id != fact_id(key, f.subject, f.predicate, f.object, f.valid_from):
        raise ValueError("fact_id does not match the fact's scope and triple (ids are content-addressed)")


def encode_user(key: UserKey, data: UserGraph) -> str:
    """The JSON lines (ASCII, each with its newline) of one user's graph."""
    out = []
    for kind, records in (("entity", data.entities), ("fact", data.facts), ("diary", data.diary)):
        for r in records:
            line = {"record": kind, "app": key.app, "user": key.user, **r.model_dump(mode="json")}
            out.append(json.dumps(line, ensure_ascii=True, separators=(",", ":")) + "\n")
    return "".join(out)


def _error(lineno: int, message: str, loc: str | None = None) -> ValidationError:
    return ValidationError(f"line {lineno}" + (f", field {loc}" if loc else "") + f": {message}",
                           field=f"lines.{lineno}" + (f".{loc}" if loc else ""))


def parse_lines(data: bytes | str | Iterable[bytes | str], app: str) -> dict[str, UserGraph]:
    """User → their records, every line validated first (blank lines skipped)."""
    if isinstance(data, bytes | str):
        lines: Iterable[bytes | str] = data.split("\n") if isinstance(data, str) else data.split(b"\n")
    else:
        lines = data
    out: dict[str, UserGraph] = {}
    for lineno, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
            raise _error(lineno, f"malformed JSON ({type(exc).__name__})") from None
        if not isinstance(obj, dict):
            raise _error(lineno, "each line must be a JSON object")
        try:
            scope = _Scope.model_validate(obj)
            if scope.app != app:
                raise _error(lineno, f"the record belongs to app {scope.app!r}, not {app!r}", "app")
            fields = {k: v for k, v in obj.items() if k not in ("record", "app", "user")}
            record = _MODELS[scope.record].model_validate(fields)
            key = UserKey(app=scope.app, user=scope.user)
            if isinstance(record, Fact):
                _check_fact(key, record)
        except pydantic.ValidationError as exc:
            raise _error(lineno, *first_error(exc.errors())) from None
        except ValueError as exc:
            raise _error(lineno, str(exc), "fact_id") from None
        user = out.setdefault(scope.user, UserGraph())
        if isinstance(record, Entity):
            user.entities.append(record)
        elif isinstance(record, Fact):
            user.facts.append(record)
        elif isinstance(record, DiaryEntry):
            user.diary.append(record)
    return out
