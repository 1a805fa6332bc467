"""The knowledge graph and the agent diary of a user: the records, their limits and the input rules
(the one home of each; the operations are :mod:`memcore.knowledge`'s, the storage a
:class:`memcore.archive_ports.GraphRepository` / :class:`memcore.archive_ports.DiaryRepository`).

**Entities** are named things of one user: a display ``name``, an optional ``type`` and ``aliases``;
every name is looked up by its :func:`entity_key` (case folded, whitespace collapsed), and an alias
leads to its entity. **Facts** are ``subject -> predicate -> object`` between two entities
(:func:`predicate_key`: ``"Lives In"`` is ``lives_in``), bi-temporal:

- *valid time* ``valid_from`` / ``valid_to``: when the fact held in the world (None: unbounded);
  ``valid_to`` is exclusive and never before ``valid_from``;
- *record time* ``recorded_at`` / ``retired_at``: when memcluster came to believe this version of
  the fact, and when a later version replaced it (None: still believed).

A fact is a line of versions sharing one ``fact_id`` (its content id: scope, subject, predicate,
object, ``valid_from``); a change (an end date, a supersede, more provenance) never edits a version:
it retires the believed one and records its successor at the same instant, so "what was true on X"
(valid time) and "what did we believe on X" (record time) are both answered from the rows.
A fact's sources are the memories (``memories``: entry ids) and archived turns (``turns``: refs of
:mod:`memcore.provenance`) it came from, plus ``source`` (free text such as a file name) and ``writer``.
A version whose ``valid_to`` a supersede set names the superseding line in ``ended_by``, so deleting that
line opens the fact again (:mod:`memcore.supersession`).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from datetime import date, datetime, time
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from memcore.errors import ValidationError
from memcore.fields import encodable, utc
from memcore.model import UserKey
from memcore.vocabulary import FactOperationType

# ------------------------------------------------------------------ limits (declared once)
MAX_ENTITY_CHARS = 200
"""Longest entity name or alias (characters, after trimming)."""
MAX_PREDICATE_CHARS = 100
MAX_TYPE_CHARS = 64
MAX_ALIASES = 32
MAX_SOURCES = 64
"""Most memory ids, and most turn refs, one fact cites."""
MAX_SOURCE_CHARS = 512
MAX_FACTS_PER_USER = 100_000
"""Most believed (unretired) fact versions of one user; an add beyond it is refused."""
MAX_HOPS = 3
"""The widest neighbourhood a query may ask for."""
DEFAULT_RESULTS = 100
MAX_RESULTS = 1000
"""Most facts (or entities) one query answers."""
MAX_DIARY_CHARS = 20_000
DEFAULT_DIARY_RESULTS = 10
MAX_DIARY_RESULTS = 100
MAX_AGENT_CHARS = 128

Direction = Literal["outgoing", "incoming", "both"]
DIRECTIONS: tuple[Direction, ...] = ("outgoing", "incoming", "both")
Writer = Literal["agent", "api", "extractor", "import"]
DEFAULT_AGENT = "agent"
"""The diary's agent name when a call names none."""
DEFAULT_TOPIC = "general"

_SPACE = re.compile(r"\s+")
_PRED_SEP = re.compile(r"[\s\-]+")


def entity_key(name: str) -> str:
    """The lookup key of an entity name or alias: NFKC, trimmed, whitespace collapsed, case folded."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", name)).strip().casefold()


def predicate_key(predicate: str) -> str:
    """A predicate as stored: trimmed, case folded, runs of spaces and dashes made one ``_``."""
    return _PRED_SEP.sub("_", predicate.strip().casefold()).strip("_")


def _name(value: str, what: str, max_chars: int = MAX_ENTITY_CHARS) -> str:
    value = _SPACE.sub(" ", encodable(value, what)).strip()
    if not value:
        raise ValueError(f"{what} must not be empty")
    if len(value) > max_chars:
        raise ValueError(f"{what} is longer than {max_chars} characters")
    return value


def _predicate(value: str) -> str:
    key = predicate_key(encodable(value, "predicate"))
    if not key:
        raise ValueError("predicate must not be empty")
    if len(key) > MAX_PREDICATE_CHARS:
        raise ValueError(f"predicate is longer than {MAX_PREDICATE_CHARS} characters")
    return key


def parse_time(value: Any, field: str) -> datetime | None:
    """A date (``YYYY-MM-DD``: its midnight, UTC) or an ISO-8601 date-time (naive: UTC) as a UTC datetime;
    None and ``""`` are None; anything else raises ValidationError naming ``field``."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, date):
        return utc(datetime.combine(value, time()))
    if isinstance(value, str):
        text = value.strip()
        try:
            if len(text) == 10:
                return utc(datetime.combine(date.fromisoformat(text), time()))
            return utc(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            pass
    raise ValidationError(f"{value!r} is not a date (YYYY-MM-DD) or an ISO-8601 date-time", field=field)


def _time(value: Any, info: Any) -> datetime | None:
    try:
        return parse_time(value, info.field_name)
    except ValidationError as exc:
        raise ValueError(exc.message) from None


def _sources(v: list[str]) -> list[str]:
    out = list(dict.fromkeys(s for s in (x.strip() for x in v) if s))
    if len(out) > MAX_SOURCES:
        raise ValueError(f"at most {MAX_SOURCES} sources")
    for s in out:
        if len(s) > MAX_SOURCE_CHARS:
            raise ValueError(f"a source is longer than {MAX_SOURCE_CHARS} characters")
        encodable(s, "source")
    return out


EntityName = Annotated[str, AfterValidator(lambda v: _name(v, "name"))]
Predicate = Annotated[str, AfterValidator(_predicate)]
Sources = Annotated[list[str], AfterValidator(_sources)]


def _check_interval(valid_from: datetime | None, valid_to: datetime | None, field: str = "valid_to") -> None:
    if valid_from is not None and valid_to is not None and valid_to < valid_from:
        raise ValidationError(f"{field} ({valid_to.isoformat()}) is before valid_from ({valid_from.isoformat()})",
                              field=field)


# ------------------------------------------------------------------ records
class Entity(BaseModel):
    """An entity of one user as stored: ``key`` is :func:`entity_key` of ``name``."""

    model_config = ConfigDict(frozen=True)

    key: str
    name: str
    type: str | None = None
    aliases: list[str] = Field(default_factory=list)


class Fact(BaseModel):
    """One version of a fact (see the module docstring); ``subject``/``object`` are entity keys."""

    model_config = ConfigDict(frozen=True)

    id: str
    fact_id: str
    subject: str
    subject_name: str
    predicate: str
    object: str
    object_name: str
    valid_from: datetime | None = None
    valid_to: datetime | None = None
    recorded_at: datetime
    retired_at: datetime | None = None
    confidence: float = 1.0
    memories: list[str] = Field(default_factory=list)
    turns: list[str] = Field(default_factory=list)
    source: str | None = None
    writer: Writer = "api"
    ended_by: str | None = None
    """The ``fact_id`` of the line whose supersede set this version's ``valid_to`` (None: no supersede did)."""

    def believed(self, known_at: datetime | None = None) -> bool:
        """Whether this version was believed at record time ``known_at`` (None: now, i.e. not retired)."""
        if known_at is None:
            return self.retired_at is None
        return self.recorded_at <= known_at and (self.retired_at is None or known_at < self.retired_at)

    def valid(self, at: datetime) -> bool:
        """Whether the fact held at valid time ``at``."""
        return (self.valid_from is None or self.valid_from <= at) and (self.valid_to is None or at < self.valid_to)

    def sources(self) -> set[str]:
        return {*self.memories, *self.turns}

    def successor(self, at: datetime, **changes: Any) -> Fact:
        """The next version of this fact, recorded at ``at`` with ``changes``."""
        return self.model_copy(update={**changes, "id": version_id(self.fact_id, at), "recorded_at": at,
                                       "retired_at": None})


class DiaryEntry(BaseModel):
    """One agent diary entry of a user: per (app, user, agent), newest first when read."""

    model_config = ConfigDict(frozen=True)

    id: str
    agent: str
    text: str
    topic: str = DEFAULT_TOPIC
    wing: str | None = None
    written_at: datetime


# ------------------------------------------------------------------ inputs
class EntityInput(BaseModel):
    """An entity to declare (its type and aliases); the aliases given replace the stored ones."""

    model_config = ConfigDict(extra="forbid")

    name: EntityName
    type: str | None = Field(default=None, max_length=MAX_TYPE_CHARS)
    aliases: list[str] = Field(default_factory=list, max_length=MAX_ALIASES)

    @field_validator("aliases")
    @classmethod
    def _aliases(cls, v: list[str]) -> list[str]:
        return list(dict.fromkeys(_name(a, "alias") for a in v))


class FactInput(BaseModel):
    """A fact to add (or the new object of a supersede); dates are ``YYYY-MM-DD`` or ISO-8601."""

    model_config = ConfigDict(extra="forbid")

    subject: EntityName
    predicate: Predicate
    object: EntityName
    valid_from: Annotated[datetime | None, Field(default=None)] = None
    valid_to: Annotated[datetime | None, Field(default=None)] = None
    confidence: float = Field(default=1.0, ge=0.0, le=1.0, allow_inf_nan=False)
    memories: Sources = Field(default_factory=list)
    turns: Sources = Field(default_factory=list)
    source: str | None = Field(default=None, max_length=MAX_SOURCE_CHARS)
    subject_type: str | None = Field(default=None, max_length=MAX_TYPE_CHARS)
    object_type: str | None = Field(default=None, max_length=MAX_TYPE_CHARS)

    _times = field_validator("valid_from", "valid_to", mode="before")(_time)

    @field_validator("valid_to")
    @classmethod
    def _interval(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        try:
            _check_interval(info.data.get("valid_from"), v)
        except ValidationError as exc:
            raise ValueError(exc.message) from None
        return v


class FactRef(BaseModel):
    """A fact named by its triple (an invalidate)."""

    model_config = ConfigDict(extra="forbid")

    subject: EntityName
    predicate: Predicate
    object: EntityName
    ended: datetime | None = None

    _times = field_validator("ended", mode="before")(_time)


class FactQuery(BaseModel):
    """Facts of an entity (or, with ``entity`` None, of the whole graph of the user)."""

    model_config = ConfigDict(extra="forbid")

    entity: EntityName | None = None
    direction: Direction = "both"
    predicate: Predicate | None = None
    as_of: datetime | None = None
    """Valid time: only facts that held then (None: every believed version, each with ``current``)."""
    known_at: datetime | None = None
    """Record time: what was believed then (None: what is believed now)."""
    limit: int = Field(default=DEFAULT_RESULTS, ge=1, le=MAX_RESULTS)

    _times = field_validator("as_of", "known_at", mode="before")(_time)


class NeighbourhoodQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    entity: EntityName
    hops: int = Field(default=1, ge=1, le=MAX_HOPS)
    as_of: datetime | None = None
    """Valid time of the edges walked (None: now)."""
    known_at: datetime | None = None
    limit: int = Field(default=DEFAULT_RESULTS, ge=1, le=MAX_RESULTS)

    _times = field_validator("as_of", "known_at", mode="before")(_time)


class DiaryInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(default=DEFAULT_AGENT)
    text: str
    topic: str = DEFAULT_TOPIC
    wing: str | None = None

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        return _name(v, "agent", MAX_AGENT_CHARS)

    @field_validator("topic")
    @classmethod
    def _topic(cls, v: str) -> str:
        return _name(v, "topic", MAX_TYPE_CHARS)

    @field_validator("wing")
    @classmethod
    def _wing(cls, v: str | None) -> str | None:
        return None if v is None or not v.strip() else _name(v, "wing", MAX_AGENT_CHARS)

    @field_validator("text")
    @classmethod
    def _text(cls, v: str) -> str:
        return _name(v, "text", MAX_DIARY_CHARS)


class DiaryQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(default=DEFAULT_AGENT)
    limit: int = Field(default=DEFAULT_DIARY_RESULTS, ge=1, le=MAX_DIARY_RESULTS)
    since: datetime | None = None
    until: datetime | None = None
    wing: str | None = None

    _times = field_validator("since", "until", mode="before")(_time)

    @field_validator("agent")
    @classmethod
    def _agent(cls, v: str) -> str:
        return _name(v, "agent", MAX_AGENT_CHARS)

    @field_validator("until")
    @classmethod
    def _range(cls, v: datetime | None, info: ValidationInfo) -> datetime | None:
        since = info.data.get("since")
        if since is not None and v is not None and v < since:
            raise ValueError("until is before since")
        return v


class FactOperation(BaseModel):
    """A fact operation an extractor proposes (:data:`memcore.vocabulary.FACT_TOOLS`): ``fact`` holds the
    fields of a :class:`FactInput` (add, supersede) or a :class:`FactRef` (invalidate), validated when applied
    (a bad one fails alone); ``turns`` the delta's event ids it came from."""

    type: FactOperationType
    fact: dict[str, Any]
    turns: list[str] = Field(default_factory=list)


# ------------------------------------------------------------------ ids
def _digest(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()[:32]


def fact_id(key: UserKey, subject: str, predicate: str, obj: str, valid_from: datetime | None) -> str:
    """The content id of a fact line: scope, entity keys, predicate and ``valid_from``."""
    return "f_" + _digest(key.app, key.user, subject, predicate, obj, valid_from.isoformat() if valid_from else "")


def version_id(line: str, recorded_at: datetime) -> str:
    """The id of the version of fact line ``line`` recorded at ``recorded_at``."""
    return "v_" + _digest(line, recorded_at.isoformat())


def diary_id(key: UserKey, agent: str, text: str, written_at: datetime) -> str:
    return "d_" + _digest(key.app, key.user, agent, text, written_at.isoformat())


def check_interval(valid_from: datetime | None, valid_to: datetime | None, field: str = "valid_to") -> None:
    """An interval whose end is before its start raises ValidationError naming ``field``."""
    _check_interval(valid_from, valid_to, field)
