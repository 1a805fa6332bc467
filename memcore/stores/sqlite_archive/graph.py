"""The knowledge graph and the agent diary on SQLite (:class:`memcore.archive_ports.GraphRepository`,
:class:`memcore.archive_ports.DiaryRepository`): tables ``graph_entities``, ``graph_aliases``, ``graph_facts`` and
``diary`` of the archive file (:mod:`memcore.stores.sqlite_archive.schema`). Times are integer microseconds
(:mod:`memcore.stores.archive_codec`); source lists are JSON arrays."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memcore.graph import DiaryEntry, Direction, Entity, Fact, entity_key
from memcore.model import UserKey
from memcore.stores.archive_codec import at_us, from_us, to_us
from memcore.stores.sqlite_archive.database import Database, chunks, marks

_FACT_COLS = ("id, fact_id, subject, subject_name, predicate, object, object_name, valid_from_us, valid_to_us,"
              " recorded_us, retired_us, confidence, memories, turns, source, writer, ended_by")


def _us(value: datetime | None) -> int | None:
    return None if value is None else to_us(value)


def _fact(row: tuple[Any, ...]) -> Fact:
    (id_, line, subject, subject_name, predicate, obj, object_name, vf, vt, rec, ret, conf, mems, turns,
     source, writer, ended_by) = row
    return Fact(id=id_, fact_id=line, subject=subject, subject_name=subject_name, predicate=predicate, object=obj,
                object_name=object_name, valid_from=from_us(vf), valid_to=from_us(vt), recorded_at=at_us(rec),
                retired_at=from_us(ret), confidence=conf, memories=json.loads(mems), turns=json.loads(turns),
                source=source, writer=writer, ended_by=ended_by)


class SqliteGraph:
    def __init__(self, db: Database) -> None:
        self._db = db

    def entities(self, key: UserKey, keys: Sequence[str] | None = None) -> list[Entity]:
        scope = (key.app, key.user)
        sql = "SELECT key, name, type, aliases FROM graph_entities WHERE app = ? AND user = ?"
        if keys is None:
            rows = self._db.query(sql + " ORDER BY key", scope)
        else:
            rows = [r for part in chunks(keys) for r in self._db.query(
                sql + f" AND key IN ({marks(len(part))})", (*scope, *part))]
            rows.sort()
        return [Entity(key=k, name=n, type=t, aliases=json.loads(a)) for k, n, t, a in rows]

    def resolve(self, key: UserKey, names: Sequence[str]) -> dict[str, str]:
        scope = (key.app, key.user)
        out: dict[str, str] = {}
        for part in chunks(names):
            m = marks(len(part))
            for name, entity in self._db.query(
                    f"SELECT alias, entity FROM graph_aliases WHERE app = ? AND user = ? AND alias IN ({m})"
                    f" UNION ALL SELECT key, key FROM graph_entities WHERE app = ? AND user = ? AND key IN ({m})",
                    (*scope, *part, *scope, *part)):
                out[name] = entity  # an entity's own key comes last: it wins over an alias
        return out

    def facts(self, key: UserKey, entities: Sequence[str] | None = None, *, direction: Direction = "both",
              predicate: str | None = None, believed_only: bool = False) -> list[Fact]:
        base = f"SELECT {_FACT_COLS} FROM graph_facts WHERE app = ? AND user = ?"
        args: list[Any] = [key.app, key.user]
        if predicate is not None:
            base += " AND predicate = ?"
            args.append(predicate)
        if believed_only:
            base += " AND retired_us IS NULL"
        if entities is None:
            rows = self._db.query(base, args)
        else:
            cols = {"outgoing": ("subject",), "incoming": ("object",), "both": ("subject", "object")}[direction]
            seen: dict[str, tuple[Any, ...]] = {}
            for part in chunks(entities):
                for col in cols:
                    for r in self._db.query(base + f" AND {col} IN ({marks(len(part))})", [*args, *part]):
                        seen[r[0]] = r
            rows = list(seen.values())
        facts = [_fact(r) for r in rows]
        facts.sort(key=lambda f: (f.recorded_at, f.id))
        return facts

    def lines(self, key: UserKey, fact_ids: Sequence[str]) -> list[Fact]:
        rows = [r for part in chunks(fact_ids) for r in self._db.query(
            f"SELECT {_FACT_COLS} FROM graph_facts WHERE app = ? AND user = ? AND fact_id IN ({marks(len(part))})",
            (key.app, key.user, *part))]
        facts = [_fact(r) for r in rows]
        facts.sort(key=lambda f: (f.recorded_at, f.id))
        return facts

    def write(self, key: UserKey, *, at: datetime, retire: Sequence[str] = (), add: Sequence[Fact] = (),
              entities: Sequence[Entity] = (), drop: Sequence[str] = ()) -> int:
        removed = 0
        with self._db.tx() as db:
            for part in chunks(list(dict.fromkeys(drop))):
                removed += int(db.execute(f"DELETE FROM graph_facts WHERE app = ? AND user = ? AND fact_id IN"
                                          f" ({marks(len(part))})", (key.app, key.user, *part)).rowcount)
            db.executemany("UPDATE graph_facts SET retired_us = ? WHERE app = ? AND user = ? AND id = ?"
                           " AND retired_us IS NULL", [(to_us(at), key.app, key.user, i) for i in retire])
            insert_graph(db, key, add, entities)
        return removed

    def count(self, key: UserKey) -> int:
        return int(self._db.query("SELECT count(*) FROM graph_facts WHERE app = ? AND user = ? AND retired_us IS NULL",
                                  (key.app, key.user))[0][0])

    def users(self, app: str) -> list[str]:
        return [u for (u,) in self._db.query(
            "SELECT user FROM graph_facts WHERE app = ? UNION SELECT user FROM graph_entities WHERE app = ?"
            " UNION SELECT user FROM diary WHERE app = ? ORDER BY 1", (app, app, app))]

    def expire(self, app: str, before: datetime) -> int:
        with self._db.tx() as db:
            return int(db.execute(
                "DELETE FROM graph_facts WHERE app = ? AND (user, fact_id) IN (SELECT user, fact_id FROM graph_facts"
                " WHERE app = ? GROUP BY user, fact_id HAVING max(recorded_us) < ?)",
                (app, app, to_us(before))).rowcount)


def _alias_keys(entity: Entity) -> list[str]:
    return [k for k in dict.fromkeys(entity_key(a) for a in entity.aliases) if k != entity.key]


def insert_graph(tx: sqlite3.Connection, key: UserKey, facts: Sequence[Fact], entities: Sequence[Entity]) -> None:
    """In ``tx``: insert fact versions (a version id already stored is left as it is) and upsert entities with
    their alias rows (:meth:`SqliteGraph.write`; a user's move, :mod:`memcore.stores.sqlite_archive.transfer`)."""
    scope = (key.app, key.user)
    tx.executemany(
        f"INSERT OR IGNORE INTO graph_facts (app, user, {_FACT_COLS})"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [(*scope, f.id, f.fact_id, f.subject, f.subject_name, f.predicate, f.object, f.object_name,
          _us(f.valid_from), _us(f.valid_to), to_us(f.recorded_at), _us(f.retired_at), f.confidence,
          json.dumps(f.memories), json.dumps(f.turns), f.source, f.writer, f.ended_by) for f in facts])
    for e in entities:
        tx.execute("INSERT INTO graph_entities (app, user, key, name, type, aliases) VALUES (?, ?, ?, ?, ?, ?)"
                   " ON CONFLICT (app, user, key) DO UPDATE SET name = excluded.name, type = excluded.type,"
                   " aliases = excluded.aliases", (*scope, e.key, e.name, e.type, json.dumps(e.aliases)))
        tx.execute("DELETE FROM graph_aliases WHERE app = ? AND user = ? AND entity = ?", (*scope, e.key))
        tx.executemany("INSERT OR REPLACE INTO graph_aliases (app, user, alias, entity) VALUES (?, ?, ?, ?)",
                       [(*scope, a, e.key) for a in _alias_keys(e)])


def insert_diary(tx: sqlite3.Connection, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
    """In ``tx``: store diary entries (an id already stored is left as it is); how many were new."""
    return sum(int(tx.execute(
        "INSERT OR IGNORE INTO diary (app, user, id, agent, text, topic, wing, written_us)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (key.app, key.user, e.id, e.agent, e.text, e.topic, e.wing, to_us(e.written_at))).rowcount)
        for e in entries)


class SqliteDiary:
    def __init__(self, db: Database) -> None:
        self._db = db

    def write(self, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
        with self._db.tx() as db:
            return insert_diary(db, key, entries)

    def read(self, key: UserKey, agent: str | None, *, limit: int | None, since: datetime | None = None,
             until: datetime | None = None, wing: str | None = None) -> tuple[list[DiaryEntry], int]:
        where = "app = ? AND user = ?"
        args: list[Any] = [key.app, key.user]
        for sql, value in (("agent = ?", agent), ("wing = ?", wing), ("written_us >= ?", _us(since)),
                           ("written_us <= ?", _us(until))):
            if value is not None:
                where += f" AND {sql}"
                args.append(value)
        total = int(self._db.query(f"SELECT count(*) FROM diary WHERE {where}", args)[0][0])
        rows = self._db.query(f"SELECT id, agent, text, topic, wing, written_us FROM diary WHERE {where}"
                              " ORDER BY written_us DESC, id DESC LIMIT ?", [*args, -1 if limit is None else limit])
        return [DiaryEntry(id=i, agent=a, text=t, topic=tp, wing=w, written_at=at_us(us))
                for i, a, t, tp, w, us in rows], total

    def expire(self, app: str, before: datetime) -> int:
        with self._db.tx() as db:
            return int(db.execute("DELETE FROM diary WHERE app = ? AND written_us < ?", (app, to_us(before))).rowcount)
