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
from actors.context import ShardContext, ShardPart
from actors.generations import Generations
from actors.shard_graph import graph_of, turn_refs
from memcore.model import UserKey
from memcore.records import Turn
from memcore.service import MemoryService

log = logging.getLogger(__name__)


class ShardErasure(ShardPart):
    def __init__(self, ctx: ShardContext, generations: Generations) -> None:
        super().__init__(ctx)
        self.generations = generations
        self.marker = ctx.layout.compact_marker
        self.graph = graph_of(ctx)

    def _hard(self, hard: bool | None) -> bool:
        return (not self.served.get().config.soft_delete) if hard is None else hard

    def _sources(self, key: UserKey, gone: set[Turn], hard: bool, memories: set[str] | None = None) -> int:
        """Hide (soft) or remove (hard) these archived turns and the staged entries made of them; a hard
        deletion also removes the graph facts whose only sources were these turns and ``memories``."""
        changed = erasure.drop(self.archive, key, gone, hard=hard)
        self.generations.note_gone(key, gone)
        if hard:
            self.graph.drop_sources(key, memories or set(), turn_refs(gone))
            self.marker.touch()
        return changed

    def delete(self, key: UserKey, entry_id: str, hard: bool | None, purge_sources: bool = False) -> dict[str, int]:
        service = self.served.get()
        hard = self._hard(hard)
        src = service.get(key, entry_id)
        service.delete(key, entry_id, hard=hard)
        index = erasure.index_of(self.archive, key, src.provenance)
        gone = erasure.sources([src], service.vectors.scroll(key, include_deleted=False), index,
                               purge=purge_sources)
        with self.generations.others() as others:
            for other in others:
                erasure.retire_ids(other, key, [entry_id], hard=hard)
                erasure.prune_derived(other, key, gone, self.archive)
        return {"entries": 1, "events": self._sources(key, gone, hard, {entry_id})}

    def clear(self, key: UserKey, hard: bool | None, purge_sources: bool = False) -> dict[str, int]:
        """Clear ``key``: the turns the cleared entries came from go too; with ``purge_sources`` every
        archived turn of the user."""
        service = self.served.get()
        hard = self._hard(hard)
        removed = list(service.vectors.scroll(key, include_deleted=hard))
        cleared = service.clear(key, hard=hard)
        if purge_sources:
            gone = erasure.index_of(self.archive, key).turns()
        else:
            gone = erasure.sources(removed, [], erasure.index_of(self.archive, key, erasure.cited(removed)))
        with self.generations.others() as others:
            for other in others:
                other.clear(key, hard=hard)
                erasure.prune_derived(other, key, gone, self.archive)
        return {"entries": cleared, "events": self._sources(key, gone, hard, {e.id for e in removed})}

    def drop_turns(self, key: UserKey, session: str, event_ids: list[str] | None) -> dict[str, Any]:
        """Remove (hard) ``session``'s archived turns, the given ones or all of them, and every entry (in
        every generation) that cites one of them and has no source turn left. A pending extraction job
        never reads a removed turn (only visible ones are extracted). Entries go first, then the turns in
        one transaction: a retry after a crash in between finishes the erasure."""
        service = self.served.get()
        dropping = {t.turn for t in self.archive.events.turns(key, session=session, ids=event_ids)
                    if t.state != "removed"}
        doomed = self._sourceless(service, key, dropping)
        if doomed:
            service.vectors.delete(key, doomed)
            service.keywords.delete(doomed)
        with self.generations.others() as others:
            for other in others:
                erasure.retire_ids(other, key, self._sourceless(other, key, dropping), hard=True)
        removed = self.archive.events.remove(key, dropping)
        self.graph.drop_sources(key, set(doomed), turn_refs(dropping))
        self.generations.note_gone(key, dropping)
        if removed or doomed:
            self.marker.touch()
        return {"session": session, "events": removed, "entries": len(doomed)}

    def _sourceless(self, service: MemoryService, key: UserKey, dropping: set[Turn]) -> list[str]:
        if not dropping:
            return []
        entries = list(service.vectors.scroll(key, include_deleted=True))
        return erasure.sourceless(entries, erasure.index_of(self.archive, key, erasure.cited(entries)), dropping)

    def forget(self, key: UserKey) -> dict[str, Any]:
        """Erase everything of ``key`` in this shard; returns the counts of what was removed."""
        service = self.served.get()
        turns = erasure.index_of(self.archive, key).turns()
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
        self.generations.note_gone(key, turns)
        self.marker.touch()
        return {"app": key.app, "user": key.user, "entries": entries, "other_generation_entries": elsewhere,
                "events": rows["events"], "sessions": rows["sessions"], "jobs": rows["jobs"],
                "access_records": rows["access"], "facts": rows.get("graph_facts", 0),
                "diary_entries": rows.get("diary", 0)}

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
