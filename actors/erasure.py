"""What an erasure takes, in a shard's archive and stores: the rules of :mod:`memcore.provenance` applied
to the archived turns (:class:`memcore.archive_ports.EventRepository`) and to the entries of each generation.

Archived turns are visible, hidden (a soft delete: kept, but no read path, recall or re-extraction
sees them) or removed (a hard delete or a clear: text blanked, recall index row dropped; the id
stays so that a resend of the same event is still recognised); forgetting a user deletes every row
of the user but its write counter (:meth:`memcore.archive_ports.EventArchive.erase_user`), and a compaction
rewrites the archive without the freed bytes (:meth:`memcore.archive_ports.EventArchive.compact`).

The sources of a deletion (:func:`sources`) are the turns the removed entries cite, less those an
active remaining entry of the user cites for certain (all of them with ``purge_sources``). Removing
turns takes the entries that lose their last source with them (:func:`sourceless`); the other
generations drop the entries made from a turn gone (:func:`prune_derived`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from memcore.archive_ports import EventArchive
from memcore.fields import now_utc
from memcore.model import Entry, UserKey
from memcore.provenance import TurnIndex, event_ids
from memcore.records import ArchivedTurn, Turn
from memcore.service import MemoryService


def index_of(archive: EventArchive, key: UserKey, refs: Iterable[str] | None = None, *,
             gone: Iterable[Turn] = ()) -> TurnIndex:
    """``key``'s archived turns that ``refs`` may name (every turn of the user when ``refs`` is None), with
    the turns of ``gone`` as removed (those already erased from the archive included)."""
    if refs is None:
        turns = archive.events.turns(key)
    else:
        ids = sorted(event_ids(refs))
        turns = archive.events.turns(key, ids=ids) if ids else []
    return TurnIndex([*turns, *(ArchivedTurn(t.session, t.event_id, "removed") for t in gone)])


def hidden_turns(archive: EventArchive, key: UserKey) -> set[Turn]:
    """``key``'s hidden or removed turns."""
    return {t.turn for t in archive.events.turns(key) if not t.visible}


def cited(entries: Iterable[Entry]) -> list[str]:
    """Every provenance ref of ``entries``, once."""
    return list(dict.fromkeys(p for e in entries for p in e.provenance))


def sources(removed: Iterable[Entry], remaining: Iterable[Entry], index: TurnIndex, *,
            purge: bool = False) -> set[Turn]:
    """The turns the ``removed`` entries may come from, less those an active entry of ``remaining`` names
    for certain (all of them with ``purge``)."""
    turns = index.named(cited(removed))
    if purge or not turns:
        return turns
    return turns - index.certain(cited(e for e in remaining if e.active))


def drop(archive: EventArchive, key: UserKey, turns: Iterable[Turn], *, hard: bool) -> int:
    """Remove (hard) or hide (soft) these turns; returns how many changed."""
    return archive.events.remove(key, turns) if hard else archive.events.hide(key, turns)


def sourceless(entries: Iterable[Entry], index: TurnIndex, dropping: set[Turn]) -> list[str]:
    """Ids of the entries that cite one of the turns ``dropping`` and have no ref left that may name a
    visible turn."""
    return [e.id for e in entries if index.sourceless(e.provenance, dropping)]


def prune_derived(service: MemoryService, key: UserKey, gone: set[Turn], archive: EventArchive) -> int:
    """Hard-delete ``key``'s entries of ``service`` made from a turn of ``gone`` (:meth:`TurnIndex.derived`,
    against the archive as it is now); returns how many."""
    if not gone:
        return 0
    entries = list(service.vectors.scroll(key, include_deleted=True))
    index = index_of(archive, key, cited(entries), gone=gone)
    doomed = [e.id for e in entries if index.derived(e.provenance, gone)]
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
