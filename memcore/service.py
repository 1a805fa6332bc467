"""MemoryService: one shard's worth of behaviour over a VectorStore, a KeywordIndex and an Embedder.

Usable in a plain Python process; the shard actor wraps one instance per shard.
Writes go to the vector store first (the source of truth), then to the keyword index.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
import pydantic

from memcore import backup, budget, fusion, search, tracing
from memcore.errors import ConflictError, NotFoundError, ValidationError
from memcore.expiry import Expiry
from memcore.fields import now_utc
from memcore.ids import memory_id
from memcore.metadata import Scalar, check_filter, matches
from memcore.model import Entry, Kind, Memory, MemoryPatch, UserKey
from memcore.ports import Embedder, KeywordIndex, Vectors, VectorStore
from memcore.search import Knobs
from memcore.search_model import SearchHit, SearchOptions, TopicsMatch, has_topics
from memcore.settings import ServiceConfig
from memcore.validation import error_of, make_key, store_errors, validate


class MemoryService:
    def __init__(
        self,
        vectors: VectorStore,
        keywords: KeywordIndex,
        embedder: Embedder,
        config: ServiceConfig | None = None,
        *,
        clock: Callable[[], Any] = now_utc,
        expiry: Expiry | None = None,
    ) -> None:
        self.vectors = vectors
        self.keywords = keywords
        self.embedder = embedder
        self.config = config or ServiceConfig()
        self.token_count: budget.TokenCounter = budget.counter(self.config.token_counter)
        """How this service counts the tokens of a ``max_tokens`` budget."""
        self._clock = clock
        self.expiry = expiry or Expiry()
        """When an entry has expired (its own expiry, its app's lifetime): no read returns it from then on."""
        self._write_lock = threading.RLock()

    # ----------------------------------------------------------------- writes
    def add(self, key: UserKey, memory: Memory | dict[str, Any], *, vector: Vectors | None = None) -> Entry:
        """Add (idempotent): same content -> same id, topics replaced, tombstone reactivated."""
        return self.add_many(key, [memory], vectors=vector)[0]

    def add_many(
        self, key: UserKey, memories: Sequence[Memory | dict[str, Any]], *, vectors: Vectors | None = None
    ) -> list[Entry]:
        """Add several memories in one batch (one embedding call, one upsert)."""
        many = len(memories) > 1
        mems = [validate(Memory, m, prefix=f"memories.{i}." if many else "") for i, m in enumerate(memories)]
        if vectors is not None and len(vectors) != len(mems):
            raise ValidationError("one vector per memory is required", field="vectors")
        with self._write_lock, store_errors("add"):
            now = self._clock()
            for i, mem in enumerate(mems):
                _check_future(mem.expires_at, now, f"memories.{i}.expires_at" if many else "expires_at")
            by_id: dict[str, Entry] = {}
            order: list[str] = []
            ids = [memory_id(key, m) for m in mems]
            existing = {e.id: e for e in self.vectors.get(key, list(dict.fromkeys(ids)))}
            live = {e.id for e in self.expiry.live(existing.values(), now)}
            to_embed: dict[str, int] = {}
            for i, (mid, mem) in enumerate(zip(ids, mems, strict=True)):
                prev = by_id.get(mid) or (existing[mid] if mid in live else None)
                if prev is not None:
                    entry = _apply(prev, mem, now, provenance=_union(prev.provenance, mem.provenance))
                    entry = entry.model_copy(update={"deleted_at": None, "expires_at": mem.expiry(now)})
                else:  # new, or expired and not yet swept: written afresh
                    entry = _new_entry(key, mid, mem, now, created_at=now)
                if mid not in by_id:
                    order.append(mid)
                by_id[mid] = entry
                old = existing.get(mid)
                if old is None or old.text != entry.text:
                    to_embed[mid] = i
            entries = [by_id[m] for m in order]
            fresh = [by_id[m] for m in order if m in to_embed]
            same = [by_id[m] for m in order if m not in to_embed]
            if fresh:
                if vectors is not None:
                    vecs = np.asarray(vectors, dtype=np.float32)[[to_embed[e.id] for e in fresh]]
                else:
                    vecs = self.embedder.embed_passages([e.text for e in fresh])
                self.vectors.upsert(fresh, vecs)
            if same:
                self.vectors.set_payload(same)
            self.keywords.upsert(entries)
            return [by_id[mid] for mid in ids]

    def update(self, key: UserKey, entry_id: str, memory: MemoryPatch | Memory | dict[str, Any]) -> Entry:
        """Update following seed 001's five states; returns the entry under its effective id.

        Only the fields the caller gave change (a :class:`MemoryPatch`, a dict of some fields, or the
        fields a :class:`Memory` was given); the rest of the entry is kept. A change of content
        rotates the id and carries everything else over; a topics-only change keeps the id. The expiry is
        kept unless the patch names one (``ttl_s``, ``expires_at``; :meth:`MemoryPatch.expiry`)."""
        patch = MemoryPatch.of(memory) if isinstance(memory, Memory) else validate(MemoryPatch, memory)
        with self._write_lock, store_errors("update"):
            src = self._active(key, entry_id, live=True)
            mem = Memory.model_validate({**_memory_of(src), **patch.changes(), "provenance": patch.provenance})
            now = self._clock()
            expires_at = patch.expiry(now, src.expires_at)
            if patch.names_expiry():
                _check_future(expires_at, now, "expires_at")
            new_id = memory_id(key, mem)
            if new_id == src.id:
                entry = _apply(src, mem, now, provenance=_union(src.provenance, mem.provenance))
                entry = entry.model_copy(update={"expires_at": expires_at})
                self._write(entry, reembed=entry.text != src.text)
                return entry
            target = next(iter(self.expiry.live(self.vectors.get(key, [new_id]), now)), None)
            if target is not None and target.active:
                raise ConflictError(f"update would rotate onto active memory {new_id}", field="memory_id")
            if target is not None and self.config.soft_delete:
                entry = _new_entry(key, new_id, mem, now, created_at=target.created_at)  # reactivated: keeps its own
            else:
                entry = _new_entry(key, new_id, mem, now, created_at=src.created_at)  # inherits the source's
            entry = entry.model_copy(update={"provenance": _union(src.provenance, mem.provenance),
                                             "metadata": _metadata_of(mem, src), "expires_at": expires_at})
            # Crash-safe rotation: the new entry is written naming the id it replaces, the old one is
            # retired, then the mark is cleared; a shard killed in between finishes it on start
            # (finish_rotations), so exactly one of the two stays active.
            self._write(entry.model_copy(update={"replaces": src.id}), reembed=True)
            self._retire(src, now)
            self.vectors.set_payload([entry])
            return entry

    def finish_rotations(self, owns: Callable[[UserKey], bool] = lambda _key: True) -> int:
        """Finish every rotating update a crash interrupted (entries still marked ``replaces``) among
        the entries of the users ``owns`` accepts: the replaced entry is retired if it is still active
        and the mark is cleared. Returns how many were finished. Run before serving, after a crash."""
        with self._write_lock, store_errors("recovery"):
            pending = [e for e in self.vectors.scroll(None, include_deleted=False)
                       if e.replaces is not None and owns(e.key)]
            for entry in pending:
                old = next(iter(self.vectors.get(entry.key, [entry.replaces or ""])), None)
                if old is not None and old.active:
                    self._retire(old, entry.updated_at)
                done = entry.model_copy(update={"replaces": None})
                self.vectors.set_payload([done])
                self.keywords.upsert([done])
            return len(pending)

    def delete(self, key: UserKey, entry_id: str, *, hard: bool | None = None) -> None:
        with self._write_lock, store_errors("delete"):
            src = self._active(key, entry_id)
            self._retire(src, self._clock(), hard=hard)

    def clear(self, key: UserKey, *, hard: bool | None = None) -> int:
        """Delete every active entry of ``key``; returns how many were active."""
        hard = (not self.config.soft_delete) if hard is None else hard
        with self._write_lock, store_errors("clear"):
            active = [e for e in self.vectors.scroll(key, include_deleted=False)]
            if hard:
                self.vectors.delete_user(key)
                self.keywords.delete_user(key)
            elif active:
                now = self._clock()
                tomb = [e.model_copy(update={"deleted_at": now, "updated_at": now}) for e in active]
                self.vectors.set_payload(tomb)
                self.keywords.delete([e.id for e in active])
            return len(active)

    def restore(self, entries: Sequence[Entry | dict[str, Any]], *, batch_size: int = 256) -> int:
        """Write backed-up entries as they are (see :mod:`memcore.backup`); returns how many.

        Ids, timestamps and tombstones are kept; every entry is validated before anything is
        written (a bad one raises :class:`ValidationError` naming ``entries.<i>.<field>``); vectors
        are recomputed with this service's embedder, ``batch_size`` entries at a time; the keyword
        index gets the active entries (tombstones are removed from it). Existing entries with the
        same ids are replaced; other entries are left alone.
        """
        checked: list[Entry] = []
        for i, e in enumerate(entries):
            try:
                checked.append(backup.check_entry(e))
            except pydantic.ValidationError as exc:
                raise error_of(exc, prefix=f"entries.{i}.") from None
        with self._write_lock, store_errors("restore"):
            for start in range(0, len(checked), max(1, batch_size)):
                chunk = checked[start : start + max(1, batch_size)]
                self.vectors.upsert(chunk, self.embedder.embed_passages([e.text for e in chunk]))
                self.keywords.upsert(chunk)
        return len(checked)

    # ------------------------------------------------------------------ reads
    def export(self, app: str | None = None, *, user: str | None = None) -> list[Entry]:
        """Every stored entry, tombstones included, of ``app`` (every app when None) and of one
        ``user`` (every user when None), ordered by app, user and id (see :mod:`memcore.backup`).
        An expired entry (:class:`memcore.expiry.Expiry`, a tombstone too) is gone from this read as from
        every other, before the sweep removes it."""
        if user is not None and app is None:
            raise ValidationError("exporting one user needs its app", field="app")
        now = self._clock()
        with store_errors("export"):
            if app is not None and user is not None:
                stored: Iterable[Entry] = self.vectors.scroll(make_key(app, user), include_deleted=True)
            else:
                stored = (e for e in self.vectors.scroll(None, include_deleted=True) if app in (None, e.app))
            entries = self.expiry.live(stored, now)
        entries.sort(key=backup.sort_key)
        return entries

    def users(self, app: str) -> list[str]:
        """The users of ``app`` with at least one stored, unexpired entry (tombstones count), sorted."""
        now = self._clock()
        with store_errors("users"):
            return sorted({e.user for e in self.expiry.live(
                (e for e in self.vectors.scroll(None, include_deleted=True) if e.app == app), now)})

    def purge(self, key: UserKey, entry_ids: Sequence[str]) -> int:
        """Remove stored entries of ``key`` for good, active ones and tombstones alike (the TTL sweep: an
        expired tombstone's text goes too); returns how many were stored."""
        with self._write_lock, store_errors("purge"):
            ids = [e.id for e in self.vectors.get(key, list(entry_ids))]
            if ids:
                self.vectors.delete(key, ids)
                self.keywords.delete(ids)
            return len(ids)

    def get(self, key: UserKey, entry_id: str) -> Entry:
        with store_errors("get"):
            return self._active(key, entry_id, live=True)

    def read(
        self, key: UserKey, limit: int | None = None, metadata_filter: dict[str, Scalar] | None = None, *,
        topics: Sequence[str] | None = None, topics_match: TopicsMatch = "any",
    ) -> list[Entry]:
        """Active entries, newest ``updated_at`` first; ``limit`` None or <= 0 means all; with a
        ``metadata_filter`` only the entries whose metadata has every ``key: value``; with ``topics``
        only those with any (``topics_match="any"``) or all of them (every entry is read, then filtered)."""
        flt = _metadata_filter(metadata_filter)
        now = self._clock()
        with store_errors("read"):
            entries = [e for e in self.expiry.live(self.vectors.scroll(key, include_deleted=False), now)
                       if matches(e.metadata, flt) and has_topics(e.topics, topics, topics_match)]
        entries.sort(key=lambda e: (e.updated_at, e.id), reverse=True)
        return entries[:limit] if limit and limit > 0 else entries

    def count(self, key: UserKey) -> int:
        with store_errors("count"):
            return self.vectors.count(key)

    def search(
        self, key: UserKey, options: SearchOptions | dict[str, Any], *, query_vector: Vectors | None = None
    ) -> list[SearchHit]:
        """Search honouring every option (see :class:`SearchOptions`). An empty query returns nothing."""
        opts = validate(SearchOptions, options)
        if not opts.query.strip():
            return []
        with store_errors("search"):
            if query_vector is None:
                with tracing.embed_span(self.embedder):
                    query_vector = self.embedder.embed_queries([opts.query])[0]
            qvec = np.asarray(query_vector, dtype=np.float32).reshape(-1)
            alive = self.expiry.alive(key, self._clock())
            merging = opts.hybrid and Knobs.of(opts, self.config).merge_overlapping
            scan = opts.max_results * self.config.merge_scan if merging else opts.max_results
            # the hits read below: only the first ``scan``, unless a dedup, a budget (its windows) or a kind
            # fallback looks further
            whole = opts.deduplicate or opts.max_tokens is not None or (opts.kind is not None and opts.kind_fallback)
            need = None if whole else scan
            hits = self._search_once(key, opts, qvec, opts.kind, need=need, alive=alive)
            if opts.kind is not None and opts.kind_fallback and len(hits) < fusion.KIND_FALLBACK_MIN:
                hits = fusion.merge_kind_fallback(hits, self._search_once(key, opts, qvec, None, alive=alive),
                                                  opts.kind)
        if opts.deduplicate:
            hits = fusion.deduplicate(hits)
        windows = hits
        if merging:
            hits = fusion.merge_overlapping(hits, opts.max_results, scan=scan)
        hits = hits[: opts.max_results]
        if opts.max_tokens is not None:
            hits = budget.fit_hits(hits, opts.max_tokens, opts.query, self.token_count, windows=windows)
        if opts.order_by_event_time:
            hits = fusion.order_by_event_time(hits)
        return hits

    # -------------------------------------------------------------- internals
    def _search_once(self, key: UserKey, opts: SearchOptions, qvec: Vectors, kind: Kind | None, *,
                     need: int | None = None, alive: Callable[[Entry], bool] | None = None) -> list[SearchHit]:
        return search.search_once(self.vectors, self.keywords, self.config, key, opts, qvec, kind, need=need,
                                  alive=alive)

    def _active(self, key: UserKey, entry_id: str, *, live: bool = False) -> Entry:
        """The active entry ``entry_id``; with ``live`` an expired one is not found either (reads,
        updates; a delete, the TTL sweep's among them, still finds it)."""
        if not entry_id or len(entry_id) > 256 or not entry_id.isprintable():
            raise NotFoundError(f"memory {entry_id!r} not found", field="memory_id")
        found = next(iter(self.vectors.get(key, [entry_id])), None)
        if found is None or not found.active or (live and not self.expiry.live([found], self._clock())):
            raise NotFoundError(f"memory {entry_id!r} not found", field="memory_id")
        return found

    def _write(self, entry: Entry, *, reembed: bool) -> None:
        if reembed:
            self.vectors.upsert([entry], self.embedder.embed_passages([entry.text]))
        else:
            self.vectors.set_payload([entry])
        self.keywords.upsert([entry])

    def _retire(self, src: Entry, now: Any, *, hard: bool | None = None) -> None:
        hard = (not self.config.soft_delete) if hard is None else hard
        if hard:
            self.vectors.delete(src.key, [src.id])
        else:
            self.vectors.set_payload([src.model_copy(update={"deleted_at": now, "updated_at": now})])
        self.keywords.delete([src.id])


def _metadata_filter(value: Any) -> dict[str, Scalar] | None:
    try:
        return check_filter(value)
    except ValueError as exc:
        raise ValidationError(str(exc), field=getattr(exc, "field", "metadata_filter")) from None


def _metadata_of(mem: Memory, prev: Entry) -> dict[str, Any]:
    """A write that does not name ``metadata`` (an extractor's or a tool's) keeps the entry's."""
    return mem.metadata if "metadata" in mem.model_fields_set else dict(prev.metadata)


def _new_entry(key: UserKey, entry_id: str, mem: Memory, now: Any, *, created_at: Any) -> Entry:
    data = {**mem.model_dump(exclude={"ttl_s"}), "expires_at": mem.expiry(now)}
    return Entry(id=entry_id, app=key.app, user=key.user, created_at=created_at, updated_at=now, **data)


def _check_future(expires_at: datetime | None, now: datetime, field: str) -> None:
    """An expiry a write gives must be after the write (an entry born expired is refused, not stored)."""
    if expires_at is not None and expires_at <= now:
        raise ValidationError("expires_at must be in the future", field=field)


def _memory_of(entry: Entry) -> dict[str, Any]:
    """The caller-settable fields of a stored entry (provenance excepted)."""
    return {f: getattr(entry, f) for f in Memory.model_fields if f not in ("provenance", "ttl_s", "expires_at")}


def _apply(prev: Entry, mem: Memory, now: Any, *, provenance: list[str]) -> Entry:
    data = mem.model_dump()
    data["provenance"] = provenance
    data["metadata"] = _metadata_of(mem, prev)
    return prev.model_copy(update={**data, "updated_at": now})


def _union(a: Sequence[str], b: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))
