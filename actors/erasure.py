"""Erasure in a shard's archive and stores: forgetting a user, the archived turns a delete or a clear
removes, removing a session's turns (and the entries made only from them), TTL expiry of archived
turns, and what a compaction does to the SQLite file.

Archived turns have a ``hidden`` state: 0 visible, 1 hidden (a soft delete: kept, but no read path,
recall or re-extraction sees it), 2 removed (a hard delete or a clear: the text is blanked and its
recall index row dropped; the id stays so that a resend of the same event ids is still recognised).
Forgetting a user deletes every row of the user (turns, index rows, session cursors, jobs, access
times). The archive runs with ``secure_delete`` (freed bytes are zeroed); :func:`compact_archive`
merges the recall index, rewrites the file and truncates the write-ahead log.

The sources of a deletion (:func:`orphaned_sources`) are the provenance turns of the removed entries
that no remaining active entry of the user was also made from (all of them with ``purge_sources``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from actors.archive import SqliteArchive
from memcore.fields import now_utc
from memcore.model import Entry, UserKey
from memcore.service import MemoryService

VISIBLE, HIDDEN, REMOVED = 0, 1, 2
_CHUNK = 500


def _chunks(ids: Sequence[str]) -> Iterable[list[str]]:
    unique = list(dict.fromkeys(ids))
    for i in range(0, len(unique), _CHUNK):
        yield unique[i:i + _CHUNK]


def erase_user(archive: SqliteArchive, key: UserKey) -> dict[str, int]:
    """Delete every archived row of ``key``; returns the counts by table."""
    scope = (key.app, key.user)
    with archive.transaction() as db:
        db.execute("DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE app = ? AND user = ?)",
                   scope)
        counts = {name: int(db.execute(f"DELETE FROM {name} WHERE app = ? AND user = ?", scope).rowcount)
                  for name in ("events", "sessions", "jobs", "access")}
    return counts


def drop_sources(archive: SqliteArchive, key: UserKey, event_ids: Sequence[str],
                 how: Literal["hide", "remove"]) -> int:
    """Hide or remove ``key``'s archived turns with these event ids (any session); returns how many changed."""
    changed = 0
    with archive.transaction() as db:
        for chunk in _chunks(event_ids):
            marks = ", ".join("?" * len(chunk))
            where = f"app = ? AND user = ? AND id IN ({marks})"
            args: list[Any] = [key.app, key.user, *chunk]
            if how == "hide":
                changed += int(db.execute(f"UPDATE events SET hidden = {HIDDEN} WHERE {where} AND hidden = {VISIBLE}",
                                          args).rowcount)
                continue
            db.execute(f"DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE {where}"
                       f" AND hidden != {REMOVED})", args)
            changed += int(db.execute(f"UPDATE events SET hidden = {REMOVED}, content = '' WHERE {where}"
                                      f" AND hidden != {REMOVED}", args).rowcount)
    return changed


def _turns_where(key: UserKey, session: str, event_ids: Sequence[str] | None) -> tuple[str, list[Any]]:
    where, args = "app = ? AND user = ? AND session = ?", [key.app, key.user, session]
    if event_ids is not None:
        where += f" AND id IN ({', '.join('?' * len(event_ids))})" if event_ids else " AND 0"
        args += list(event_ids)
    return where + f" AND hidden != {REMOVED}", args


def session_turns(archive: SqliteArchive, key: UserKey, session: str, event_ids: Sequence[str] | None) -> set[str]:
    """Ids of ``key``'s not yet removed turns of ``session`` (those of ``event_ids``, or all)."""
    where, args = _turns_where(key, session, event_ids)
    return {r[0] for r in archive.query(f"SELECT id FROM events WHERE {where}", args)}


def remove_turns(archive: SqliteArchive, key: UserKey, session: str, event_ids: Sequence[str] | None) -> list[str]:
    """Remove (blank, drop from recall) ``key``'s archived turns of ``session``: those with these event ids, or
    all of them (None), in one transaction; returns the ids of the turns that were not removed before."""
    where, args = _turns_where(key, session, event_ids)
    with archive.transaction() as db:
        ids = [r[0] for r in db.execute(f"SELECT id FROM events WHERE {where}", args)]
        db.execute(f"DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE {where})", args)
        db.execute(f"UPDATE events SET hidden = {REMOVED}, content = '' WHERE {where}", args)
    return ids


def gone_ids(archive: SqliteArchive, key: UserKey) -> set[str]:
    """Event ids of ``key``'s hidden or removed turns."""
    return {r[0] for r in archive.query("SELECT id FROM events WHERE app = ? AND user = ? AND hidden != 0",
                                        (key.app, key.user))}


def expire_events(archive: SqliteArchive, app: str, cutoff_us: int) -> int:
    """Delete ``app``'s archived turns older than ``cutoff_us`` (their timestamp), except those an unfinished
    extraction job of their session has yet to read; returns how many."""
    where = ("app = ? AND ts_us < ? AND NOT (extracted = 0 AND EXISTS (SELECT 1 FROM jobs j WHERE j.app = events.app"
             " AND j.user = events.user AND j.session = events.session AND j.status IN ('queued', 'running')))")
    with archive.transaction() as db:
        db.execute(f"DELETE FROM events_fts WHERE rowid IN (SELECT rowid FROM events WHERE {where})", (app, cutoff_us))
        return int(db.execute(f"DELETE FROM events WHERE {where}", (app, cutoff_us)).rowcount)


def compact_archive(archive: SqliteArchive) -> None:
    """Merge the recall index (dropping deleted postings), rewrite the file, truncate the WAL."""
    archive.maintenance_sql("INSERT INTO events_fts (events_fts) VALUES ('optimize')", "VACUUM",
                            "PRAGMA wal_checkpoint(TRUNCATE)")


# ------------------------------------------------------------------ entries
def sourceless(entries: Iterable[Entry], removed: set[str], visible: set[str]) -> list[str]:
    """Ids of the entries made from any of the turns ``removed`` none of whose source turns is ``visible``
    any more (the rule of :func:`orphaned_sources`, the other way round)."""
    return [e.id for e in entries if removed & set(e.provenance) and not visible & set(e.provenance)]


def orphaned_sources(removed: Iterable[Entry], remaining: Iterable[Entry], *, purge: bool = False) -> set[str]:
    """Provenance turns of ``removed`` that no active entry of ``remaining`` also came from (all with ``purge``)."""
    sources = {p for e in removed for p in e.provenance}
    if purge:
        return sources
    return sources - {p for e in remaining if e.active for p in e.provenance}


def prune_derived(service: MemoryService, key: UserKey, gone: set[str]) -> int:
    """Hard-delete ``key``'s entries of ``service`` made from any of the turns ``gone``; returns how many."""
    if not gone:
        return 0
    doomed = [e.id for e in service.vectors.scroll(key, include_deleted=True) if gone & set(e.provenance)]
    if doomed:
        service.vectors.delete(key, doomed)
        service.keywords.delete(doomed)
    return len(doomed)


def retire_ids(service: MemoryService, key: UserKey, ids: Sequence[str], *, hard: bool) -> None:
    """Delete these entries of ``key`` in a service other than the serving one (unknown ids are ignored):
    hard, or as tombstones of the active ones."""
    if not ids:
        return
    if hard:
        service.vectors.delete(key, ids)
    else:
        now = now_utc()
        tombs = [e.model_copy(update={"deleted_at": now, "updated_at": now})
                 for e in service.vectors.get(key, ids) if e.active]
        service.vectors.set_payload(tombs)
    service.keywords.delete(list(ids))
