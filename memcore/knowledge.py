"""The knowledge graph's and the diary's operations for one shard's users, over a
:class:`memcore.archive_ports.GraphRepository` and a :class:`memcore.archive_ports.DiaryRepository` (the records
and rules are :mod:`memcore.graph`'s).

Writes (each one :meth:`GraphRepository.write`, so nothing is half-written):

- :meth:`KnowledgeGraph.add` is idempotent: a triple already believed and valid now (or the same line:
  same ``valid_from``) is the same fact; new sources or a changed end make a new version, not a new fact;
- :meth:`KnowledgeGraph.supersede` closes the believed objects of (subject, predicate) at ``valid_from``
  (default now) and opens the new one at the same instant (the closed versions name it in ``ended_by``);
- :meth:`KnowledgeGraph.invalidate` ends a fact at ``ended`` (default now), keeping its history;
- :meth:`KnowledgeGraph.drop_sources` hard-deletes the facts whose every source is among the ones gone
  (a hard delete of memories, removed turns), and :meth:`KnowledgeGraph.delete_fact` one fact line; both
  open again what a deleted line's supersede ended (:mod:`memcore.supersession`), in the same write.

Reads resolve an entity name through its key and aliases; an unknown entity answers empty.
The shard runs writes in the user's FIFO (one writer per user), so a read-then-write here is safe.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from memcore.archive_ports import DiaryRepository, GraphRepository
from memcore.errors import NotFoundError, ValidationError
from memcore.fields import now_utc
from memcore.graph import (
    DEFAULT_RESULTS,
    MAX_FACTS_PER_USER,
    MAX_RESULTS,
    DiaryEntry,
    DiaryInput,
    DiaryQuery,
    Entity,
    EntityInput,
    Fact,
    FactInput,
    FactQuery,
    FactRef,
    NeighbourhoodQuery,
    Writer,
    check_interval,
    diary_id,
    entity_key,
    fact_id,
    predicate_key,
    version_id,
)
from memcore.model import UserKey
from memcore.supersession import reopened
from memcore.validation import validate


def _iso(t: datetime | None) -> str | None:
    return None if t is None else t.isoformat()


def fact_json(fact: Fact, now: datetime, entity: str | None = None) -> dict[str, Any]:
    """A fact as tools and the API show it: the triple by display names, its times, ``current`` (believed
    and valid now), ``ended_by`` (the ``fact_id`` whose supersede ended it) and, relative to ``entity`` (a key),
    its ``direction``."""
    out: dict[str, Any] = {
        "fact_id": fact.fact_id, "version_id": fact.id,
        "subject": fact.subject_name, "predicate": fact.predicate, "object": fact.object_name,
        "valid_from": _iso(fact.valid_from), "valid_to": _iso(fact.valid_to),
        "recorded_at": _iso(fact.recorded_at), "retired_at": _iso(fact.retired_at),
        "confidence": fact.confidence, "current": fact.retired_at is None and fact.valid(now),
        "memories": list(fact.memories), "turns": list(fact.turns), "source": fact.source, "writer": fact.writer,
        "ended_by": fact.ended_by,
    }
    if entity is not None:
        out["direction"] = "outgoing" if fact.subject == entity else "incoming"
    return out


def diary_json(entry: DiaryEntry) -> dict[str, Any]:
    """A diary entry in the shape of MemPalace's ``mempalace_diary_read`` (plus id, agent and wing)."""
    return {"id": entry.id, "agent": entry.agent, "date": entry.written_at.date().isoformat(),
            "timestamp": entry.written_at.isoformat(), "topic": entry.topic, "wing": entry.wing,
            "content": entry.text}


_DAWN = datetime.min.replace(tzinfo=UTC)


def _chronological(f: Fact) -> tuple[datetime, datetime, str]:
    """Valid-time order: by start (an unknown start first), then by record time."""
    return (f.valid_from or _DAWN, f.recorded_at, f.id)


class KnowledgeGraph:
    def __init__(self, graph: GraphRepository, diary: DiaryRepository, *,
                 clock: Callable[[], datetime] = now_utc, max_facts: int = MAX_FACTS_PER_USER) -> None:
        self.graph, self.diary = graph, diary
        self._clock = clock
        self.max_facts = max_facts

    # ------------------------------------------------------------ entities
    def _key_of(self, key: UserKey, name: str) -> str | None:
        """The entity ``name`` names (by key or alias), or None."""
        k = entity_key(name)
        return self.graph.resolve(key, [k]).get(k)

    def _endpoint(self, key: UserKey, name: str, type_: str | None, known: dict[str, Entity],
                  pending: dict[str, Entity]) -> Entity:
        k = self._key_of(key, name) or entity_key(name)
        if k in pending:
            return pending[k]
        entity = known.get(k) or next(iter(self.graph.entities(key, [k])), None)
        if entity is None:
            entity = Entity(key=k, name=name, type=type_)
            pending[k] = entity
        elif type_ and entity.type != type_:
            entity = entity.model_copy(update={"type": type_})
            pending[k] = entity
        known[k] = entity
        return entity

    def declare(self, key: UserKey, entity: EntityInput | Mapping[str, Any]) -> Entity:
        """Create or change an entity (its type; its aliases, replaced). An alias that names another entity is
        refused (422 naming ``aliases``)."""
        spec = validate(EntityInput, entity)
        k = self._key_of(key, spec.name) or entity_key(spec.name)
        taken = self.graph.resolve(key, [entity_key(a) for a in spec.aliases])
        for alias in spec.aliases:
            owner = taken.get(entity_key(alias))
            if owner is not None and owner != k:
                raise ValidationError(f"alias {alias!r} already names entity {owner!r}", field="aliases")
        current = next(iter(self.graph.entities(key, [k])), None)
        kept_type = current.type if current is not None else None
        out = Entity(key=k, name=current.name if current else spec.name, type=spec.type or kept_type,
                     aliases=[a for a in spec.aliases if entity_key(a) != k])
        self.graph.write(key, at=self._clock(), entities=[out])
        return out

    def entity(self, key: UserKey, name: str) -> Entity | None:
        k = self._key_of(key, name)
        return None if k is None else next(iter(self.graph.entities(key, [k])), None)

    # -------------------------------------------------------------- writes
    def _room(self, key: UserKey, new: int) -> None:
        if new and self.graph.count(key) + new > self.max_facts:
            raise ValidationError(f"the user has {self.max_facts} facts, the most one user may keep", field="facts")

    def _believed(self, key: UserKey, subject: str, predicate: str) -> list[Fact]:
        return self.graph.facts(key, [subject], direction="outgoing", predicate=predicate, believed_only=True)

    def add(self, key: UserKey, fact: FactInput | Mapping[str, Any], *, writer: Writer = "api") -> tuple[Fact, bool]:
        """Record a fact; returns (its believed version, whether the fact is new). See the module docstring."""
        spec = validate(FactInput, fact)
        now = self._clock()
        known: dict[str, Entity] = {}
        pending: dict[str, Entity] = {}
        s = self._endpoint(key, spec.subject, spec.subject_type, known, pending)
        o = self._endpoint(key, spec.object, spec.object_type, known, pending)
        same = [f for f in self._believed(key, s.key, spec.predicate) if f.object == o.key]
        if spec.valid_from is None:
            match = next((f for f in same if f.valid(now) and spec.valid_to is None), None)
            valid_from = now if same and match is None else None
        else:
            valid_from = spec.valid_from
            match = next((f for f in same if f.valid_from == valid_from), None)
        if match is not None:
            changes: dict[str, Any] = {}
            if not set(spec.memories) <= set(match.memories) or not set(spec.turns) <= set(match.turns):
                changes["memories"] = list(dict.fromkeys([*match.memories, *spec.memories]))
                changes["turns"] = list(dict.fromkeys([*match.turns, *spec.turns]))
            if spec.valid_to is not None and spec.valid_to != match.valid_to:
                check_interval(match.valid_from, spec.valid_to)
                changes.update(valid_to=spec.valid_to, ended_by=None)
            if not changes and not pending:
                return match, False
            if not changes:
                self.graph.write(key, at=now, entities=list(pending.values()))
                return match, False
            nxt = match.successor(now, **changes)
            self.graph.write(key, at=now, retire=[match.id], add=[nxt], entities=list(pending.values()))
            return nxt, False
        check_interval(valid_from, spec.valid_to)
        self._room(key, 1)
        line = fact_id(key, s.key, spec.predicate, o.key, valid_from)
        new = Fact(id=version_id(line, now), fact_id=line, subject=s.key, subject_name=s.name,
                   predicate=spec.predicate, object=o.key, object_name=o.name, valid_from=valid_from,
                   valid_to=spec.valid_to, recorded_at=now, confidence=spec.confidence, memories=spec.memories,
                   turns=spec.turns, source=spec.source, writer=writer)
        self.graph.write(key, at=now, add=[new], entities=list(pending.values()))
        return new, True

    def supersede(self, key: UserKey, fact: FactInput | Mapping[str, Any], *,
                  writer: Writer = "api") -> tuple[Fact, list[Fact], bool]:
        """Make ``fact``'s object the one object of (subject, predicate) from ``valid_from`` (default now): the
        believed facts with another object that are open then end there, the new one opens there, in one
        write. Returns (the believed fact with the new object, the closed versions, whether that fact is new)."""
        spec = validate(FactInput, fact)
        now = self._clock()
        at = spec.valid_from or now
        known: dict[str, Entity] = {}
        pending: dict[str, Entity] = {}
        s = self._endpoint(key, spec.subject, spec.subject_type, known, pending)
        o = self._endpoint(key, spec.object, spec.object_type, known, pending)
        believed = self._believed(key, s.key, spec.predicate)
        open_ = [f for f in believed if f.valid_to is None or f.valid_to > at]
        current = next((f for f in open_ if f.object == o.key and f.valid(at)), None)
        line = current.fact_id if current is not None else fact_id(key, s.key, spec.predicate, o.key, at)
        retire: list[str] = []
        closed: list[Fact] = []
        for f in open_:
            if f.object == o.key:
                continue
            if f.valid_from is not None and f.valid_from > at:
                raise ValidationError(f"the fact {f.subject_name} -> {f.predicate} -> {f.object_name} starts "
                                      f"{f.valid_from.isoformat()}, after valid_from", field="valid_from")
            retire.append(f.id)
            closed.append(f.successor(now, valid_to=at, ended_by=line))
        added: list[Fact] = []
        if current is None:
            check_interval(at, spec.valid_to)
            self._room(key, 1)
            current = Fact(id=version_id(line, now), fact_id=line, subject=s.key, subject_name=s.name,
                           predicate=spec.predicate, object=o.key, object_name=o.name, valid_from=at,
                           valid_to=spec.valid_to, recorded_at=now, confidence=spec.confidence,
                           memories=spec.memories, turns=spec.turns, source=spec.source, writer=writer)
            added.append(current)
        if retire or added or pending:
            self.graph.write(key, at=now, retire=retire, add=[*closed, *added], entities=list(pending.values()))
        return current, closed, bool(added)

    def invalidate(self, key: UserKey, ref: FactRef | Mapping[str, Any]) -> list[Fact]:
        """End the believed, still open versions of the triple at ``ended`` (default now); returns the closed
        versions (none when no such fact: nothing changes). An end before a fact's start is 422 ``ended``."""
        spec = validate(FactRef, ref)
        now = self._clock()
        ended = spec.ended or now
        s, o = self._key_of(key, spec.subject), self._key_of(key, spec.object)
        if s is None or o is None:
            return []
        targets = [f for f in self._believed(key, s, spec.predicate)
                   if f.object == o and (f.valid_to is None or f.valid_to > ended)]
        for f in targets:
            check_interval(f.valid_from, ended, "ended")
        closed = [f.successor(now, valid_to=ended, ended_by=None) for f in targets]
        if closed:
            self.graph.write(key, at=now, retire=[f.id for f in targets], add=closed)
        return closed

    def drop_sources(self, key: UserKey, memories: Collection[str] = (), turns: Collection[str] = ()) -> int:
        """Hard-delete every fact line (all its versions) that cites one of these memories or turns and no
        other source; returns the versions removed."""
        gone = {*memories, *turns}
        if not gone:
            return 0
        facts = self.graph.facts(key)
        lines: dict[str, set[str]] = {}
        for f in facts:
            lines.setdefault(f.fact_id, set()).update(f.sources())
        return self._drop(key, facts, [line for line, sources in lines.items() if sources and sources <= gone])

    def delete_fact(self, key: UserKey, line: str) -> int:
        """Hard-delete one fact line (every version); unknown is 404 ``fact_id``."""
        versions = self.graph.lines(key, [line])
        if not versions:
            raise NotFoundError(f"fact {line!r} not found", field="fact_id")
        f = versions[0]  # what its supersedes ended shares its subject and predicate
        return self._drop(key, self.graph.facts(key, [f.subject], direction="outgoing", predicate=f.predicate), [line])

    def _drop(self, key: UserKey, facts: list[Fact], lines: list[str]) -> int:
        """Delete ``lines`` and open again what their supersedes ended, in one write; the versions removed."""
        if not lines:
            return 0
        now = self._clock()
        retire, successors = reopened(facts, lines, now)
        return self.graph.write(key, at=now, drop=lines, retire=retire, add=successors)

    # --------------------------------------------------------------- reads
    def query(self, key: UserKey, query: FactQuery | Mapping[str, Any]) -> list[Fact]:
        """Facts of an entity (or of every entity) as ``query`` asks, ordered by valid time."""
        q = validate(FactQuery, query)
        entities: list[str] | None = None
        if q.entity is not None:
            k = self._key_of(key, q.entity)
            if k is None:
                return []
            entities = [k]
        facts = self.graph.facts(key, entities, direction=q.direction, predicate=q.predicate,
                                 believed_only=q.known_at is None)
        facts = [f for f in facts if f.believed(q.known_at) and (q.as_of is None or f.valid(q.as_of))]
        facts.sort(key=_chronological)
        return facts[:q.limit]

    def timeline(self, key: UserKey, entity: str | None = None, *, known_at: datetime | str | None = None,
                 limit: int = DEFAULT_RESULTS) -> list[Fact]:
        """Every version believed at ``known_at`` (default now) of the entity's facts (or of all), oldest first."""
        return self.query(key, {"entity": entity, "known_at": known_at, "limit": limit})

    def history(self, key: UserKey, entity: str, predicate: str | None = None) -> list[Fact]:
        """Every version ever recorded of the entity's facts (retired ones too), in record order."""
        k = self._key_of(key, entity)
        if k is None:
            return []
        return self.graph.facts(key, [k], predicate=predicate_key(predicate) if predicate else None)

    def neighbourhood(self, key: UserKey, query: NeighbourhoodQuery | Mapping[str, Any]) -> dict[str, Any]:
        """The entities within ``hops`` of the entity along facts valid at ``as_of`` (default now), with their
        distance, and the facts walked; at most ``limit`` entities."""
        q = validate(NeighbourhoodQuery, query)
        now = self._clock()
        at = q.as_of or now
        start = self._key_of(key, q.entity)
        if start is None:
            return {"entity": q.entity, "entities": [], "facts": []}
        dist = {start: 0}
        walked: dict[str, Fact] = {}
        frontier = [start]
        for hop in range(1, q.hops + 1):
            if not frontier or len(dist) > q.limit:
                break
            nxt: list[str] = []
            for f in self.graph.facts(key, frontier, believed_only=q.known_at is None):
                if not f.believed(q.known_at) or not f.valid(at):
                    continue
                walked.setdefault(f.id, f)
                for end in (f.subject, f.object):
                    if end not in dist and len(dist) <= q.limit:
                        dist[end] = hop
                        nxt.append(end)
            frontier = nxt
        names = {e.key: e for e in self.graph.entities(key, list(dist))}
        entities = [{"entity": names[k].name if k in names else k, "type": names[k].type if k in names else None,
                     "hops": d} for k, d in sorted(dist.items(), key=lambda kv: (kv[1], kv[0]))]
        facts = sorted(walked.values(), key=_chronological)[:MAX_RESULTS]
        return {"entity": q.entity, "entities": entities[:q.limit + 1], "facts": [fact_json(f, now) for f in facts]}

    def current_for_text(self, key: UserKey, text: str, *, limit: int = DEFAULT_RESULTS) -> list[Fact]:
        """The current facts (believed, valid now) of the entities ``text`` names (their names or aliases as
        whole words, case and spacing aside), most recently recorded first: what a search adds as ``facts``."""
        names = _ngrams(entity_key(text))
        if not names:
            return []
        found = list(dict.fromkeys(self.graph.resolve(key, names).values()))
        if not found:
            return []
        now = self._clock()
        facts = [f for f in self.graph.facts(key, found, believed_only=True) if f.valid(now)]
        facts.sort(key=lambda f: (f.recorded_at, f.id), reverse=True)
        return facts[:limit]

    def now(self) -> datetime:
        return self._clock()

    # ---------------------------------------------------------------- diary
    def write_diary(self, key: UserKey, entry: DiaryInput | Mapping[str, Any]) -> DiaryEntry:
        spec = validate(DiaryInput, entry)
        now = self._clock()
        out = DiaryEntry(id=diary_id(key, spec.agent, spec.text, now), agent=spec.agent, text=spec.text,
                         topic=spec.topic, wing=spec.wing, written_at=now)
        self.diary.write(key, [out])
        return out

    def read_diary(self, key: UserKey, query: DiaryQuery | Mapping[str, Any]) -> tuple[list[DiaryEntry], int]:
        q = validate(DiaryQuery, query)
        return self.diary.read(key, q.agent, limit=q.limit, since=q.since, until=q.until, wing=q.wing)


_MAX_NGRAM = 6


def _ngrams(text: str) -> list[str]:
    """Every run of 1..6 consecutive words of ``text`` (punctuation trimmed off each word): the candidate
    entity names of a query."""
    words = [w.strip(".,;:!?\"'()[]{}") for w in text.split()]
    words = [w for w in words if w]
    out: dict[str, None] = {}
    for i in range(len(words)):
        for n in range(1, _MAX_NGRAM + 1):
            if i + n <= len(words):
                out[" ".join(words[i:i + n])] = None
    return list(out)

