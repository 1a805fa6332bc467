"""The archived turns on PostgreSQL (:class:`memcore.archive_ports.EventRepository`).

Tool messages and tool-call-only assistant messages are not archived (as on SQLite). Session recall is
BM25 computed in SQL over each turn's :func:`memcore.text.tokenize` tokens (CJK characters one by one),
with the FTS5 formula (k1 1.2, b 0.75, idf ``ln((N - n + 0.5) / (n + 0.5))`` floored at 1e-6); N, n and
the average length are the user's own (their turns not removed), where FTS5's are the whole shard
file's. A token matches whole (``1.21``, ``don't`` are one token each; FTS5 splits them). Removing a
turn blanks its content and tokens; a compaction rewrites the table (:mod:`memcore.stores.postgres_archive`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from memcore.extraction.events import Event
from memcore.model import UserKey
from memcore.records import UNFINISHED, ArchivedTurn, RecallHit, Turn
from memcore.stores.archive_codec import HIDDEN, HIDDEN_CODES, MAX_QUERY_TOKENS, REMOVED, VISIBLE, at_us, to_us
from memcore.stores.postgres_archive.database import PgDatabase
from memcore.stores.postgres_archive.owner import Owner
from memcore.text import tokenize

K1, B = 1.2, 0.75
_EVENT = "id, role, content, ts_us, external_context"
_TURN = "app = %s AND user_id = %s AND session = %s AND id = %s"

_SEARCH = f"""
WITH docs AS MATERIALIZED (
    SELECT seq, session, hidden, tokens, ntokens, ts_us, id FROM events
    WHERE app = %(app)s AND user_id = %(user)s AND hidden != {REMOVED}
), stats AS (
    SELECT count(*)::float8 AS n, greatest(coalesce(avg(ntokens), 0), 1e-9)::float8 AS avgdl FROM docs
), hits AS MATERIALIZED (
    SELECT d.seq, d.session, d.hidden, d.ntokens, d.ts_us, d.id, u.term, count(*)::float8 AS f
    FROM docs d CROSS JOIN LATERAL unnest(d.tokens) AS u(term)
    WHERE d.tokens && %(terms)s::text[] AND u.term = ANY(%(terms)s::text[])
    GROUP BY d.seq, d.session, d.hidden, d.ntokens, d.ts_us, d.id, u.term
), idf AS (
    SELECT h.term, greatest(ln((s.n - count(*) + 0.5) / (count(*) + 0.5)), 1e-6) AS w
    FROM hits h CROSS JOIN stats s
    GROUP BY h.term, s.n
), ranked AS (
    SELECT h.seq, h.ts_us, h.id,
           sum(idf.w * h.f * ({K1} + 1) / (h.f + {K1} * (1 - {B} + {B} * h.ntokens / s.avgdl))) AS score
    FROM hits h JOIN idf ON idf.term = h.term CROSS JOIN stats s
    WHERE h.hidden = {VISIBLE} AND (%(exclude)s::text IS NULL OR h.session != %(exclude)s::text)
      AND (%(since)s::bigint IS NULL OR h.ts_us >= %(since)s::bigint)
    GROUP BY h.seq, h.ts_us, h.id
), top AS (
    SELECT seq, score FROM ranked ORDER BY score DESC, ts_us DESC, id LIMIT %(limit)s
)
SELECT e.session, e.id, e.role, e.content, e.ts_us, t.score
FROM top t JOIN events e ON e.seq = t.seq
ORDER BY t.score DESC, e.ts_us DESC, e.id
"""
"""BM25 over the user's turns in one statement: each matching turn's tokens are unnested once (``hits``:
term frequencies, whose per-term counts are the document frequencies, hidden turns included as FTS5
counts them), the visible ones are ranked and only the top ``limit`` are joined back for their text."""


def _event(row: Sequence[Any]) -> Event:
    i, r, c, t, x = row
    return Event(id=i, role=r, content=c, timestamp=at_us(t), external_context=bool(x))


class PgEvents:
    def __init__(self, db: PgDatabase, owner: Owner) -> None:
        self._db = db
        self._owner = owner

    def append(self, key: UserKey, session: str, events: Sequence[Event]) -> int:
        new = 0
        route = Owner.route(key)
        external = any(e.external_context for e in events)
        with self._db.tx() as cur:
            for e in events:
                if not e.is_text:
                    continue
                tokens = tokenize(e.content)
                # SELECT ... WHERE NOT EXISTS: a resent turn takes no arrival number (the identity's next
                # value is drawn only for a row inserted); ON CONFLICT covers a concurrent insert
                cur.execute(
                    "INSERT INTO events (app, user_id, session, id, role, content, ts_us, external_context, route,"
                    " tokens, ntokens) SELECT %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s WHERE NOT EXISTS"
                    " (SELECT 1 FROM events WHERE app = %s AND user_id = %s AND session = %s AND id = %s)"
                    " ON CONFLICT (app, user_id, session, id) DO NOTHING",
                    (key.app, key.user, session, e.id, e.role, e.content, to_us(e.timestamp), e.external_context,
                     route, tokens, len(tokens), key.app, key.user, session, e.id))
                new += cur.rowcount
            cur.execute(
                "INSERT INTO sessions (app, user_id, session, external_context, updated_at, route)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (app, user_id, session) DO UPDATE SET"
                " external_context = sessions.external_context OR excluded.external_context,"
                " updated_at = excluded.updated_at",
                (key.app, key.user, session, external, time.time(), route))
        return new

    def read(self, key: UserKey, session: str | None = None) -> list[Event]:
        sql = f"SELECT {_EVENT} FROM events WHERE app = %s AND user_id = %s AND hidden = {VISIBLE}"
        args: list[Any] = [key.app, key.user]
        if session is not None:
            sql += " AND session = %s"
            args.append(session)
        return [_event(r) for r in self._db.read(sql + " ORDER BY ts_us, seq", args)]

    def arrived(self, key: UserKey, session: str) -> list[Event]:
        return [_event(r) for r in self._db.read(
            f"SELECT {_EVENT} FROM events WHERE app = %s AND user_id = %s AND session = %s ORDER BY seq",
            (key.app, key.user, session))]

    def unextracted(self, key: UserKey, session: str, *, after_seq: int | None = None,
                    upto_seq: int | None = None) -> list[tuple[int, Event]]:
        sql = (f"SELECT seq, {_EVENT} FROM events WHERE app = %s AND user_id = %s AND session = %s"
               f" AND NOT extracted AND hidden = {VISIBLE}")
        args: list[Any] = [key.app, key.user, session]
        if after_seq is not None:
            sql += " AND seq > %s"
            args.append(after_seq)
        if upto_seq is not None:
            sql += " AND seq <= %s"
            args.append(upto_seq)
        return [(int(r[0]), _event(r[1:])) for r in self._db.read(sql + " ORDER BY seq", args)]

    def mark_extracted(self, key: UserKey, session: str, upto_seq: int | None = None,
                       ids: Sequence[str] | None = None) -> int:
        sql = "UPDATE events SET extracted = true WHERE app = %s AND user_id = %s AND session = %s AND NOT extracted"
        args: list[Any] = [key.app, key.user, session]
        if upto_seq is not None:
            sql += " AND seq <= %s"
            args.append(upto_seq)
        if ids is not None:
            sql += " AND id = ANY(%s)"
            args.append(list(dict.fromkeys(ids)))
        with self._db.tx() as cur:
            cur.execute(sql, args)
            return cur.rowcount

    def oldest_unextracted(self) -> float | None:
        rows = self._db.read(f"SELECT min(ts_us) FROM events WHERE NOT extracted AND {self._owner.where()}")
        return None if not rows or rows[0][0] is None else int(rows[0][0]) / 1e6

    def visible(self, key: UserKey, session: str, ids: Sequence[str]) -> set[str]:
        return {t.event_id for t in self.turns(key, session=session, ids=ids) if t.visible}

    def sessions_in_order(self, key: UserKey) -> list[str]:
        return [r[0] for r in self._db.read(
            f"SELECT session, min(ts_us) AS first FROM events WHERE app = %s AND user_id = %s AND hidden = {VISIBLE}"
            " GROUP BY session ORDER BY first, session", (key.app, key.user))]

    def search(self, key: UserKey, query: str, *, exclude_session: str | None = None,
               limit: int = 10, since: datetime | None = None) -> list[RecallHit]:
        tokens = list(dict.fromkeys(tokenize(query)))[:MAX_QUERY_TOKENS]
        if not tokens or limit < 1:
            return []
        rows = self._db.read(_SEARCH, {"app": key.app, "user": key.user, "terms": tokens,
                                        "exclude": exclude_session, "limit": limit,
                                        "since": None if since is None else to_us(since)})
        return [RecallHit(session=s, event_id=i, role=r, content=c, timestamp=at_us(t), score=round(float(sc), 6))
                for s, i, r, c, t, sc in rows]

    def count(self, key: UserKey | None = None) -> int:
        if key is None:
            return int(self._db.read(f"SELECT count(*) FROM events WHERE {self._owner.where()}")[0][0])
        return int(self._db.read("SELECT count(*) FROM events WHERE app = %s AND user_id = %s",
                                  (key.app, key.user))[0][0])

    # ------------------------------------------------------------ erasure
    def turns(self, key: UserKey, *, session: str | None = None,
              ids: Sequence[str] | None = None) -> list[ArchivedTurn]:
        sql = "SELECT session, id, hidden FROM events WHERE app = %s AND user_id = %s"
        args: list[Any] = [key.app, key.user]
        if session is not None:
            sql += " AND session = %s"
            args.append(session)
        if ids is not None:
            sql += " AND id = ANY(%s)"
            args.append(list(dict.fromkeys(ids)))
        return [ArchivedTurn(s, i, HIDDEN_CODES[h]) for s, i, h in self._db.read(sql + " ORDER BY seq", args)]

    def hide(self, key: UserKey, turns: Iterable[Turn]) -> int:
        rows = [(key.app, key.user, t.session, t.event_id) for t in dict.fromkeys(turns)]
        changed = 0
        with self._db.tx() as cur:
            for row in rows:
                cur.execute(f"UPDATE events SET hidden = {HIDDEN} WHERE {_TURN} AND hidden = {VISIBLE}", row)
                changed += cur.rowcount
        return changed

    def remove(self, key: UserKey, turns: Iterable[Turn]) -> int:
        rows = [(key.app, key.user, t.session, t.event_id) for t in dict.fromkeys(turns)]
        changed = 0
        with self._db.tx() as cur:
            for row in rows:
                cur.execute(f"UPDATE events SET hidden = {REMOVED}, content = '', tokens = '{{}}', ntokens = 0"
                            f" WHERE {_TURN} AND hidden != {REMOVED}", row)
                changed += cur.rowcount
        return changed

    def expire(self, app: str, before: datetime) -> int:
        with self._db.tx() as cur:
            cur.execute(
                f"DELETE FROM events e WHERE e.app = %s AND e.ts_us < %s AND {self._owner.where('e')}"
                " AND NOT (NOT e.extracted AND EXISTS (SELECT 1 FROM jobs j WHERE j.app = e.app"
                " AND j.user_id = e.user_id AND j.session = e.session AND j.status = ANY(%s)))",
                (app, to_us(before), list(UNFINISHED)))
            return cur.rowcount
