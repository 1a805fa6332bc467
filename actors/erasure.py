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
from typing import Literal

from memcore.fields import now_utc
from memcore.model import Entry, UserKey
from memcore.ports import EventArchive
from memcore.service import MemoryService


def drop_sources(archive: EventArchive, key: UserKey, event_ids: Sequence[str],
                 how: Literal["hide", "remove"]) -> int:
    """Hide or remove ``key``'s archived turns with these event ids (any session); returns how many changed."""
    turns = [t.turn for t in archive.events.turns(key, ids=event_ids)]
    return archive.events.hide(key, turns) if how == "hide" else archive.events.remove(key, turns)


def session_turns(archive: EventArchive, key: UserKey, session: str, event_ids: Sequence[str] | None) -> set[str]:
    """Ids of ``key``'s not yet removed turns of ``session`` (those of ``event_ids``, or all)."""
    return {t.event_id for t in archive.events.turns(key, session=session, ids=event_ids) if t.state != "removed"}


def remove_turns(archive: EventArchive, key: UserKey, session: str, event_ids: Sequence[str] | None) -> list[str]:
    """Remove (blank, drop from recall) ``key``'s archived turns of ``session``: those with these event ids, or
    all of them (None); returns the ids of the turns that were not removed before."""
    turns = [t.turn for t in archive.events.turns(key, session=session, ids=event_ids) if t.state != "removed"]
    archive.events.remove(key, turns)
    return [t.event_id for t in turns]


def visible_ids(archive: EventArchive, key: UserKey, event_ids: Sequence[str]) -> set[str]:
    """Which of these event ids of ``key`` are archived and visible (in any session)."""
    return {t.event_id for t in archive.events.turns(key, ids=event_ids) if t.visible}


def gone_ids(archive: EventArchive, key: UserKey) -> set[str]:
    """Event ids of ``key``'s hidden or removed turns."""
    return {t.event_id for t in archive.events.turns(key) if not t.visible}


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
