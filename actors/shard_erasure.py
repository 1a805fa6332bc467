"""What a shard does to erase: delete and clear with their archived sources, forgetting a user, compaction.

Every method runs inside the user's write turn (the shard calls it through ``_write``), except
:meth:`ShardErasure.compact`, which freezes all writes itself. A deletion applies to the serving
generation, to every other generation of the shard (the staging one of a running re-extraction and
the retired ones on disk, :meth:`actors.generations.Generations.others`) and to the archived turns
(:mod:`actors.erasure`). Anything removed for good marks the shard for compaction (the marker
``compact.needed`` in the shard directory, :mod:`memcore.layout`, so a restart does not lose it); the maintenance loop
compacts a marked shard on its next sweep, ``memctl compact`` at once.
"""

from __future__ import annotations

import logging
from typing import Any

from actors import erasure
from actors.context import ShardContext
from actors.generations import Generations
from memcore.model import UserKey
from memcore.service import MemoryService

log = logging.getLogger(__name__)


class ShardErasure:
    def __init__(self, ctx: ShardContext, generations: Generations) -> None:
        self.layout = ctx.layout
        self.shard = ctx.shard
        self.current = ctx.current
        self.archive = ctx.archive
        self.generations = generations
        self.marker = ctx.layout.compact_marker

    def _hard(self, hard: bool | None) -> bool:
        return (not self.current.get().config.soft_delete) if hard is None else hard

    def _sources(self, key: UserKey, gone: set[str], hard: bool) -> int:
        """Hide (soft) or remove (hard) these archived turns and the entries other generations made of them."""
        changed = erasure.drop_sources(self.archive, key, sorted(gone), "remove" if hard else "hide")
        self.generations.note_gone(key, gone)
        if hard:
            self.marker.touch()
        return changed

    def delete(self, key: UserKey, entry_id: str, hard: bool | None, purge_sources: bool = False) -> dict[str, int]:
        service = self.current.get()
        hard = self._hard(hard)
        src = service.get(key, entry_id)
        service.delete(key, entry_id, hard=hard)
        gone = erasure.orphaned_sources([src], service.vectors.scroll(key, include_deleted=False),
                                        purge=purge_sources)
        with self.generations.others() as others:
            for other in others:
                erasure.retire_ids(other, key, [entry_id], hard=hard)
                erasure.prune_derived(other, key, gone)
        return {"entries": 1, "events": self._sources(key, gone, hard)}

    def clear(self, key: UserKey, hard: bool | None, purge_sources: bool = False) -> dict[str, int]:
        """Clear ``key``: the turns the cleared entries came from go too; with ``purge_sources`` every
        archived turn of the user."""
        service = self.current.get()
        hard = self._hard(hard)
        removed = list(service.vectors.scroll(key, include_deleted=hard))
        cleared = service.clear(key, hard=hard)
        gone = erasure.orphaned_sources(removed, [], purge=True)
        if purge_sources:
            gone |= {e.id for e in self.archive.events.read(key)} | erasure.gone_ids(self.archive, key)
        with self.generations.others() as others:
            for other in others:
                other.clear(key, hard=hard)
                erasure.prune_derived(other, key, gone)
        return {"entries": cleared, "events": self._sources(key, gone, hard)}

    def drop_turns(self, key: UserKey, session: str, event_ids: list[str] | None) -> dict[str, Any]:
        """Remove (hard) ``session``'s archived turns, the given ones or all of them, and every entry (in
        every generation) none of whose source turns is left. A pending extraction job never reads a
        removed turn (only visible ones are extracted). Entries go first, then the turns in one
        transaction: a retry after a crash in between finishes the erasure."""
        service = self.current.get()
        doomed_turns = erasure.session_turns(self.archive, key, session, event_ids)
        entries = list(service.vectors.scroll(key, include_deleted=True))
        cited = {p for e in entries for p in e.provenance}
        still = erasure.visible_ids(self.archive, key, sorted(cited - doomed_turns)) if cited else set()
        doomed = erasure.sourceless(entries, doomed_turns, still)
        if doomed:
            service.vectors.delete(key, doomed)
            service.keywords.delete(doomed)
        with self.generations.others() as others:
            for other in others:
                gone = erasure.sourceless(other.vectors.scroll(key, include_deleted=True), doomed_turns, still)
                erasure.retire_ids(other, key, gone, hard=True)
        removed = erasure.remove_turns(self.archive, key, session, event_ids)
        self.generations.note_gone(key, set(removed))
        if removed or doomed:
            self.marker.touch()
        return {"session": session, "events": len(removed), "entries": len(doomed)}

    def forget(self, key: UserKey) -> dict[str, Any]:
        """Erase everything of ``key`` in this shard; returns the counts of what was removed."""
        service = self.current.get()
        events = {e.id for e in self.archive.events.read(key)} | erasure.gone_ids(self.archive, key)
        entries = service.vectors.count(key, include_deleted=True)
        service.vectors.delete_user(key)
        service.keywords.delete_user(key)
        elsewhere = 0
        with self.generations.others() as others:
            for other in others:
                elsewhere += other.vectors.count(key, include_deleted=True)
                other.vectors.delete_user(key)
                other.keywords.delete_user(key)
        rows = self.archive.erase_user(key)
        self.generations.note_gone(key, events)
        self.marker.touch()
        return {"app": key.app, "user": key.user, "entries": entries, "other_generation_entries": elsewhere,
                "events": rows["events"], "sessions": rows["sessions"], "jobs": rows["jobs"],
                "access_records": rows["access"]}

    def compact(self) -> dict[str, Any]:
        """Rewrite the shard's stores and archive without deleted data (see the module doc)."""
        self.marker.unlink(missing_ok=True)
        try:
            result = self.generations.compact(self.layout.embedded)
            if "skipped" in result:
                self.marker.touch()
            self.archive.compact()
        except BaseException:
            self.marker.touch()
            raise
        return result

    def compact_if_needed(self, removed: bool) -> dict[str, Any] | None:
        """The maintenance sweep's step: compact when anything was removed for good since the last time."""
        if removed:
            self.marker.touch()
        if not self.marker.exists():
            return None
        result = self.compact()
        log.info("shard %d: compacted after erasure: %s", self.shard, result)
        return result


class ErasingTools:
    """The tools' backend: the service, except that an agent's delete and clear take the archived turns
    the memories came from as the HTTP deletes do (:class:`ShardErasure`)."""

    def __init__(self, service: MemoryService, erasure: ShardErasure) -> None:
        self.service, self.erasure = service, erasure
        self.add, self.update, self.read, self.search = service.add, service.update, service.read, service.search

    def delete(self, key: UserKey, entry_id: str) -> None:
        self.erasure.delete(key, entry_id, None)

    def clear(self, key: UserKey) -> int:
        return int(self.erasure.clear(key, None)["entries"])
