"""The shard's bulk write of archived sessions (:meth:`actors.shard.ShardCore.backfill`, run in the
user's FIFO once everything has been validated)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memcore.archive_ports import EventArchive
from memcore.extraction.events import Event, cursor_of
from memcore.ids import memory_id
from memcore.model import Memory, UserKey
from memcore.ports import Vectors
from memcore.service import MemoryService


def write_backfill(service: MemoryService, archive: EventArchive, key: UserKey,
                   parsed: Sequence[tuple[str, list[Event]]], mems: Sequence[Memory],
                   vectors: Vectors | None) -> dict[str, int]:
    """Archive the sessions' turns (idempotent), add the entries that are new or gained provenance, mark
    the turns extracted and move each session's cursor to its last event; returns the counts."""
    new_events = sum(archive.events.append(key, s, events) for s, events in parsed)
    ids = [memory_id(key, m) for m in mems]
    existing = {e.id: e for e in service.vectors.get(key, list(dict.fromkeys(ids)))}
    todo = [i for i, (mid, m) in enumerate(zip(ids, mems, strict=True))
            if mid not in existing or not set(m.provenance) <= set(existing[mid].provenance)]
    if todo:
        service.add_many(key, [mems[i] for i in todo],
                         vectors=None if vectors is None else np.asarray(vectors, dtype=np.float32)[todo])
    for s, events in parsed:
        archive.events.mark_extracted(key, s, ids=[e.id for e in events])
        cursor = cursor_of(events)
        if cursor is not None:
            archive.sessions.set_last_extract_at(key, s, cursor)
    distinct = set(ids)
    return {"sessions": len(parsed), "events_new": new_events, "entries": len(distinct),
            "entries_new": len(distinct - existing.keys()), "entries_unchanged": len(mems) - len(todo)}

