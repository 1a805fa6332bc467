"""The knowledge graph and the agent diary on PostgreSQL (:class:`memcore.archive_ports.GraphRepository`,
:class:`memcore.archive_ports.DiaryRepository`): tables ``graph_entities``, ``graph_aliases``, ``graph_facts`` and
``diary`` (:mod:`memcore.stores.postgres_archive.schema`), stored as the SQLite engine stores them (times in
integer microseconds, :mod:`memcore.stores.archive_codec`; source lists and aliases as JSON text). The calls
over every user of an app (``users``, ``expire``) cover the users of this shard
(:class:`memcore.stores.postgres_archive.owner.Owner`)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from memcore.graph import DiaryEntry, Direction, Entity, Fact, entity_key
from memcore.model import UserKey
from memcore.stores.archive_codec import at_us, from_us, to_us
from memcore.stores.postgres_archive.database import Cursor, PgDatabase
from memcore.stores.postgres_archive.owner import Owner

_FACT_COLS = ("id, fact_id, subject, subject_name, predicate, object, object_name, valid_from_us, valid_to_us,"
              " recorded_us, retired_us, confidence, memories, turns, source, writer, ended_by")
_SCOPE = "app = %s AND user_id = %s"


def _us(value: datetime | None) -> int | None:
    return None if value is None else to_us(value)


def _fact(row: Sequence[Any]) -> Fact:
    (id_, line, subject, subject_name, predicate, obj, object_name, vf, vt, rec, ret, conf, mems, turns,
     source, writer, ended_by) = row
    return Fact(id=id_, fact_id=line, subject=subject, subject_name=subject_name, predicate=predicate, object=obj,
                object_name=object_name, valid_from=from_us(vf), valid_to=from_us(vt), recorded_at=at_us(rec),
                retired_at=from_us(ret), confidence=float(conf), memories=json.loads(mems), turns=json.loads(turns),
                source=source, writer=writer, ended_by=ended_by)


def _ordered(rows: Sequence[Sequence[Any]]) -> list[Fact]:
    facts = [_fact(r) for r in rows]
    facts.sort(key=lambda f: (f.recorded_at, f.id))
    return facts


def _alias_keys(entity: Entity) -> list[str]:
    return [k for k in dict.fromkeys(entity_key(a) for a in entity.aliases) if k != entity.key]


def insert_graph(cur: Cursor, key: UserKey, facts: Sequence[Fact], entities: Sequence[Entity]) -> None:
    """In ``cur``'s transaction: insert fact versions (a version id already stored is left as it is) and upsert
    entities with their alias rows (:meth:`PgGraph.write`; a user's move,
    :mod:`memcore.stores.postgres_archive.transfer`)."""
    scope = (key.app, key.user)
    route = Owner.route(key)
    if facts:
        cur.executemany(
            f"INSERT INTO graph_facts (app, user_id, route, {_FACT_COLS}) VALUES"
            " (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
            " ON CONFLICT (app, user_id, id) DO NOTHING",
            [(*scope, route, f.id, f.fact_id, f.subject, f.subject_name, f.predicate, f.object, f.object_name,
              _us(f.valid_from), _us(f.valid_to), to_us(f.recorded_at), _us(f.retired_at), f.confidence,
              json.dumps(f.memories), json.dumps(f.turns), f.source, f.writer, f.ended_by) for f in facts])
    for e in entities:
        cur.execute("INSERT INTO graph_entities (app, user_id, key, name, type, aliases, route)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (app, user_id, key) DO UPDATE SET"
                    " name = excluded.name, type = excluded.type, aliases = excluded.aliases",
                    (*scope, e.key, e.name, e.type, json.dumps(e.aliases), route))
        cur.execute(f"DELETE FROM graph_aliases WHERE {_SCOPE} AND entity = %s", (*scope, e.key))
        aliases = _alias_keys(e)
        if aliases:
            cur.executemany("INSERT INTO graph_aliases (app, user_id, alias, entity, route)"
                            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (app, user_id, alias)"
                            " DO UPDATE SET entity = excluded.entity", [(*scope, a, e.key, route) for a in aliases])


def insert_diary(cur: Cursor, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
    """In ``cur``'s transaction: store diary entries (an id already stored is left as it is); how many were new."""
    new = 0
    route = Owner.route(key)
    for e in entries:
        cur.execute("INSERT INTO diary (app, user_id, id, agent, text, topic, wing, written_us, route)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (app, user_id, id) DO NOTHING",
                    (key.app, key.user, e.id, e.agent, e.text, e.topic, e.wing, to_us(e.written_at), route))
        new += cur.rowcount
    return new


class PgGraph:
    def __init__(self, db: PgDatabase, owner: Owner) -> None:
        self._db = db
        self._owner = owner

    def entities(self, key: UserKey, keys: Sequence[str] | None = None) -> list[Entity]:
        sql = f"SELECT key, name, type, aliases FROM graph_entities WHERE {_SCOPE}"
        args: list[Any] = [key.app, key.user]
        if keys is not None:
            sql += " AND key = ANY(%s)"
            args.append(list(dict.fromkeys(keys)))
        return [Entity(key=k, name=n, type=t, aliases=json.loads(a))
                for k, n, t, a in self._db.query(sql + " ORDER BY key", args)]

    def resolve(self, key: UserKey, names: Sequence[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(names))
        if not wanted:
            return {}
        scope = (key.app, key.user, wanted)
        with self._db.tx() as cur:
            cur.execute(f"SELECT alias, entity FROM graph_aliases WHERE {_SCOPE} AND alias = ANY(%s)", scope)
            out = {name: entity for name, entity in cur.fetchall()}
            cur.execute(f"SELECT key FROM graph_entities WHERE {_SCOPE} AND key = ANY(%s)", scope)
            out.update({k: k for (k,) in cur.fetchall()})  # an entity's own key wins over an alias
        return out

    def facts(self, key: UserKey, entities: Sequence[str] | None = None, *, direction: Direction = "both",
              predicate: str | None = None, believed_only: bool = False) -> list[Fact]:
        sql = f"SELECT {_FACT_COLS} FROM graph_facts WHERE {_SCOPE}"
        args: list[Any] = [key.app, key.user]
        if predicate is not None:
            sql += " AND predicate = %s"
            args.append(predicate)
        if believed_only:
            sql += " AND retired_us IS NULL"
        if entities is not None:
            cols = {"outgoing": ("subject",), "incoming": ("object",), "both": ("subject", "object")}[direction]
            ids = list(dict.fromkeys(entities))
            sql += " AND (" + " OR ".join(f"{c} = ANY(%s)" for c in cols) + ")"
            args.extend(ids for _ in cols)
        return _ordered(self._db.query(sql, args))

    def lines(self, key: UserKey, fact_ids: Sequence[str]) -> list[Fact]:
        return _ordered(self._db.query(f"SELECT {_FACT_COLS} FROM graph_facts WHERE {_SCOPE} AND fact_id = ANY(%s)",
                                       (key.app, key.user, list(dict.fromkeys(fact_ids)))))

    def write(self, key: UserKey, *, at: datetime, retire: Sequence[str] = (), add: Sequence[Fact] = (),
              entities: Sequence[Entity] = (), drop: Sequence[str] = ()) -> int:
        removed = 0
        with self._db.tx() as cur:
            if drop:
                cur.execute(f"DELETE FROM graph_facts WHERE {_SCOPE} AND fact_id = ANY(%s)",
                            (key.app, key.user, list(dict.fromkeys(drop))))
                removed = cur.rowcount
            if retire:
                cur.execute(f"UPDATE graph_facts SET retired_us = %s WHERE {_SCOPE} AND id = ANY(%s)"
                            " AND retired_us IS NULL", (to_us(at), key.app, key.user, list(dict.fromkeys(retire))))
            insert_graph(cur, key, add, entities)
        return removed

    def count(self, key: UserKey) -> int:
        return int(self._db.query(f"SELECT count(*) FROM graph_facts WHERE {_SCOPE} AND retired_us IS NULL",
                                  (key.app, key.user))[0][0])

    def users(self, app: str) -> list[str]:
        mine = self._owner.where()
        return [u for (u,) in self._db.query(
            f"SELECT user_id FROM graph_facts WHERE app = %s AND {mine}"
            f" UNION SELECT user_id FROM graph_entities WHERE app = %s AND {mine}"
            f" UNION SELECT user_id FROM diary WHERE app = %s AND {mine} ORDER BY 1", (app, app, app))]

    def expire(self, app: str, before: datetime) -> int:
        mine = self._owner.where()
        with self._db.tx() as cur:
            cur.execute(
                f"DELETE FROM graph_facts WHERE app = %s AND {mine} AND (user_id, fact_id) IN"
                f" (SELECT user_id, fact_id FROM graph_facts WHERE app = %s AND {mine}"
                " GROUP BY user_id, fact_id HAVING max(recorded_us) < %s)", (app, app, to_us(before)))
            return cur.rowcount


class PgDiary:
    def __init__(self, db: PgDatabase, owner: Owner) -> None:
        self._db = db
        self._owner = owner

    def write(self, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
        with self._db.tx() as cur:
            return insert_diary(cur, key, entries)

    def read(self, key: UserKey, agent: str | None, *, limit: int | None, since: datetime | None = None,
             until: datetime | None = None, wing: str | None = None) -> tuple[list[DiaryEntry], int]:
        where = _SCOPE
        args: list[Any] = [key.app, key.user]
        for sql, value in (("agent = %s", agent), ("wing = %s", wing), ("written_us >= %s", _us(since)),
                           ("written_us <= %s", _us(until))):
            if value is not None:
                where += f" AND {sql}"
                args.append(value)
        with self._db.tx() as cur:
            cur.execute(f"SELECT count(*) FROM diary WHERE {where}", args)
            row = cur.fetchone()
            total = int(row[0]) if row else 0
            cur.execute(f"SELECT id, agent, text, topic, wing, written_us FROM diary WHERE {where}"
                        " ORDER BY written_us DESC, id DESC LIMIT %s", [*args, limit])
            rows = cur.fetchall()
        return [DiaryEntry(id=i, agent=a, text=t, topic=tp, wing=w, written_at=at_us(us))
                for i, a, t, tp, w, us in rows], total

    def expire(self, app: str, before: datetime) -> int:
        with self._db.tx() as cur:
            cur.execute(f"DELETE FROM diary WHERE app = %s AND written_us < %s AND {self._owner.where()}",
                        (app, to_us(before)))
            return cur.rowcount
