"""Generations of one shard's stores: re-extraction builds a new one, then reads switch in one step.

A generation is a vector store plus its keyword index (see :mod:`memcore.layout` for where each
lives: ``gen-000N/`` in the shard directory, the ``current`` pointer file, ``<collection>_gN`` on a
Qdrant server). The event archive and the session cursors live beside them and are shared by every
generation. The steps, each one call on the shard:

1. :meth:`Generations.begin` opens the staging generation N (wiping leftovers of a failed run)
   and seeds it: a copy, with their vectors, of every entry of the users *not* re-extracted,
   and of the re-extracted users' entries that carry no provenance (added through the API or a
   tool, so no archived turn would bring them back);
2. :meth:`Generations.reextract_user` (any number, concurrently for different users) replays
   the archived sessions of one user, oldest first, through an extractor and a policy into the
   staging generation (its knowledge-graph fact operations are held back: the graph is not generational);
   an extractor failure raises (the job then aborts);
3. :meth:`Generations.switch` freezes the shard's writes (every write in progress finishes,
   new ones wait), copies what was written to the serving generation since ``begin`` (live
   writes of the build: entries of other users, API entries, and extractions of turns the
   replay did not cover), replaces the pointer file atomically and swaps the service the
   shard serves from; the held fact operations are applied to the graph then, in order (those citing a
   turn deleted meanwhile left out). A read runs entirely on the service it started on: it sees the old or
   the new generation, never a mix. The old generation stays open and on disk;
4. :meth:`Generations.abort` (a failed run) closes and deletes the staging generation;
   :meth:`Generations.drop` deletes an old one. Neither touches the serving generation.

Deletions and erasures during the build are applied to the staging generation as well (and to
retired generations on disk, see :meth:`Generations.others`); the turns they removed or hid are
remembered, and at the switch every staging entry made from one of them is dropped, so a
re-extraction never brings back what was deleted before or during it (the replay reads only
visible turns). :meth:`Generations.compact` rewrites every generation's stores without what was
deleted (see :mod:`actors.erasure`).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from actors.context import ShardContext, ShardPart
from actors.erasure import hidden_turns, prune_derived
from actors.shard_graph import graph_of
from memcore import factory
from memcore.errors import ValidationError
from memcore.extraction.events import Event, cursor_of
from memcore.extraction.factory import build_extractor
from memcore.extraction.pipeline import run_extraction
from memcore.fields import now_utc
from memcore.model import Entry, UserKey
from memcore.policy.facts import DeferredFacts
from memcore.ports import Extractor, Vectors
from memcore.provenance import TurnIndex
from memcore.records import ArchivedTurn, Turn
from memcore.service import MemoryService
from memcore.settings import ExtractorSettings
from memcore.vocabulary import enabled_operations

CATCH_UP_MARGIN = timedelta(seconds=2)


@dataclass
class _Staging:
    generation: int
    service: MemoryService
    started_at: datetime
    chosen: set[UserKey]
    covered: dict[UserKey, set[Turn]] = field(default_factory=dict)
    """Turns the replay extracted, per user (a live write made only from them is not caught up)."""
    gone: dict[UserKey, set[Turn]] = field(default_factory=dict)
    """Turns hidden, removed or erased during the build, per user (their entries are dropped at the switch)."""
    facts: dict[UserKey, DeferredFacts] = field(default_factory=dict)
    """The fact operations each user's replay proposed, applied to the graph at the switch."""
    lock: threading.Lock = field(default_factory=threading.Lock)


class Generations(ShardPart):
    """The generation bookkeeping of one shard (the shard owns the writes gate and the service slot)."""

    def __init__(self, ctx: ShardContext, current: int) -> None:
        super().__init__(ctx)
        self.current = current
        self.staging: _Staging | None = None
        self.retired: dict[int, MemoryService] = {}
        self._lock = threading.Lock()
        self._state = threading.RLock()
        """Guards ``staging`` and ``retired`` only, held briefly and never while waiting for the writes
        gate: writers take it (:meth:`others`) while :meth:`switch` holds ``_lock`` and waits for them."""
        self._extractors: dict[str, Extractor] = {}

    def _build(self, generation: int) -> MemoryService:
        """A service over ``generation``'s stores, with the embedder of the service served now."""
        return factory.build_service(self.layout, self.served.get().embedder, generation=generation,
                                     last_read=self.archive.access.last_access)

    # ------------------------------------------------------------------ info
    def info(self) -> dict[str, Any]:
        on_disk = set(self.layout.generations_on_disk()) | {self.current}
        return {"shard": self.shard, "current": self.current, "generations": sorted(on_disk),
                "staging": self.staging.generation if self.staging else None}

    # ------------------------------------------------------------------ build
    def begin(self, generation: int, apps: Sequence[str] = (), users: Sequence[str] = ()) -> dict[str, Any]:
        """Open staging ``generation`` and seed it; returns the re-extracted users and the copy count."""
        with self._lock:
            if generation <= 1 or generation == self.current or generation in self.retired:
                raise ValidationError(f"generation {generation} is in use on shard {self.shard}", field="generation")
            if self.staging is not None:
                raise ValidationError(f"shard {self.shard} is already building generation "
                                      f"{self.staging.generation}", field="generation")
            chosen = set(self.archive.sessions.users(apps, users))
            with self._state:  # :meth:`others` must not open the directory as a retired generation meanwhile
                self.layout.wipe(generation)
                service = self._build(generation)
                self.staging = _Staging(generation, service, now_utc(), chosen)
        try:
            copied = self._copy(self.served.get(), service, lambda e: e.key not in chosen or not e.provenance)
        except BaseException:
            self.abort(generation)
            raise
        return {"shard": self.shard, "generation": generation, "copied": copied,
                "users": [[k.app, k.user] for k in sorted(chosen, key=lambda k: (k.app, k.user))]}

    def reextract_user(self, generation: int, key: UserKey, extractor: dict[str, Any]) -> dict[str, Any]:
        """Replay ``key``'s archived sessions into the staging generation; raises on an extractor failure."""
        staging = self._staging(generation)
        if key not in staging.chosen:
            raise ValidationError(f"{key.app}/{key.user} is not part of generation {generation}", field="user")
        app = self.settings.policy(key.app)
        if not app.extracts:  # archive_only / off: nothing is extracted, ever
            return {"app": key.app, "user": key.user, "sessions": 0, "events": 0, "operations": 0, "applied": 0,
                    "skipped": 0, "failed": 0, "rejected": 0}
        cfg = ExtractorSettings.model_validate(extractor)
        ex = self._extractor(cfg)
        policy = ex.default_policy
        enabled = enabled_operations(app.enabled_tools())
        counts = {"sessions": 0, "events": 0, "operations": 0, "applied": 0, "skipped": 0, "failed": 0,
                  "rejected": 0}
        covered: set[Turn] = set()
        facts = DeferredFacts()
        for session in self.archive.events.sessions_in_order(key):
            events = [e for e in self.archive.events.read(key, session) if e.is_text]
            if cfg.skip_external_context and self.archive.sessions.has_external_context(key, session):
                continue
            counts["sessions"] += 1
            for chunk in _chunks(events, ex.max_events):
                report = run_extraction(staging.service, key, chunk, ex, session=session, policy=policy,
                                        enabled=enabled, now=cursor_of(chunk), graph=facts)
                for name in ("events", "operations", "applied", "skipped", "failed", "rejected"):
                    counts[name] += report.counts.get(name, 0)
                covered.update(Turn(session, e.id) for e in chunk)
        with staging.lock:
            staging.covered.setdefault(key, set()).update(covered)
            staging.facts[key] = facts  # a retried user's replay replaces its earlier one
        return {"app": key.app, "user": key.user, **counts, "facts": facts.count()}

    def _extractor(self, cfg: ExtractorSettings) -> Extractor:
        tag = cfg.model_dump_json()
        with self._lock:
            ex = self._extractors.get(tag)
            if ex is None:
                ex = self._extractors[tag] = build_extractor(cfg)
            return ex

    # ------------------------------------------------------------------ switch
    def switch(self, generation: int) -> dict[str, Any]:
        """Serve ``generation`` from now on (the staging one, or one still on disk, e.g. to roll back)."""
        with self._lock:
            if generation == self.current:
                return {"shard": self.shard, "from": self.current, "to": generation, "caught_up": 0}
            staging = self.staging if self.staging and self.staging.generation == generation else None
            if staging is None and generation not in self.layout.generations_on_disk():
                raise ValidationError(f"shard {self.shard} has no generation {generation}", field="generation")
            with self._state:
                target = staging.service if staging else self.retired.pop(generation, None)
            if target is None:
                target = self._build(generation)
            t0 = time.monotonic()
            with self.ctx.freeze():
                old = self.served.get()
                caught_up = self._catch_up(old, staging) if staging else 0
                facts: dict[str, int] = {}
                if staging:
                    for key, gone in staging.gone.items():
                        prune_derived(staging.service, key, gone | hidden_turns(self.archive, key), self.archive)
                    facts = self._apply_facts(staging)
                self.layout.point_at(generation)
                self.served.replace(target)
                previous, self.current = self.current, generation
                with self._state:
                    self.retired[previous] = old
                    self.staging = None
            return {"shard": self.shard, "from": previous, "to": generation, "caught_up": caught_up,
                    "frozen_s": round(time.monotonic() - t0, 4), **facts}

    def _apply_facts(self, staging: _Staging) -> dict[str, int]:
        """Apply each user's held fact operations to the graph (in the writes freeze: nothing interleaves)."""
        kg = graph_of(self.ctx)
        applied = failed = 0
        for key, held in staging.facts.items():
            gone = staging.gone.get(key, set()) | hidden_turns(self.archive, key)
            results = held.apply(kg, key, {(t.session, t.event_id) for t in gone})
            applied += sum(r.status == "applied" for r in results)
            failed += sum(r.status == "failed" for r in results)
        return {"facts_applied": applied, "facts_failed": failed}

    def _catch_up(self, old: MemoryService, staging: _Staging) -> int:
        since = staging.started_at - CATCH_UP_MARGIN
        covered = {key: TurnIndex(ArchivedTurn(t.session, t.event_id, "visible") for t in turns)
                   for key, turns in staging.covered.items()}

        def wanted(e: Entry) -> bool:
            if e.updated_at < since:
                return False
            if e.key not in staging.chosen or not e.provenance:
                return True
            replayed = covered.get(e.key)
            return replayed is None or not all(replayed.candidates(r) for r in e.provenance)

        return self._copy(old, staging.service, wanted)

    # ------------------------------------------------------------------ erasure
    @contextmanager
    def others(self) -> Iterator[list[MemoryService]]:
        """Every generation's service but the serving one: the staging one, and each retired generation
        on disk (opened when needed and kept open), held for the ``with`` block (no abort, drop or
        switch closes one meanwhile). Used inside the user's write turn."""
        with self._state:
            out = [self.staging.service] if self.staging is not None else []
            staging = self.staging.generation if self.staging is not None else None
            for generation in self.layout.generations_on_disk():
                if generation in (self.current, staging):
                    continue
                if generation not in self.retired:
                    self.retired[generation] = self._build(generation)
                out.append(self.retired[generation])
            yield out

    def note_gone(self, key: UserKey, gone: set[Turn]) -> None:
        """Turns of ``key`` hidden, removed or erased now: drop the staging entries made from them, now
        (what was replayed already) and at the switch (what a replay still running writes)."""
        with self._state:
            staging = self.staging
        if staging is None or not gone:
            return
        with staging.lock:
            staging.gone.setdefault(key, set()).update(gone)
        prune_derived(staging.service, key, gone, self.archive)

    def compact(self, embedded: bool) -> dict[str, Any]:
        """Rewrite every generation's stores without deleted data, writes frozen: embedded vector stores are
        copied point by point into fresh directories (:mod:`memcore.stores.edge_compaction`), keyword indexes
        rebuilt into fresh ones. The serving generation is copied while it still serves reads, then
        closed, swapped and reopened with reads held (:meth:`actors.current.CurrentService.closing`: a read
        waits for the reopened stores instead of failing). Skipped while a re-extraction builds a
        generation."""
        with self._lock:
            if self.staging is not None:
                return {"shard": self.shard, "skipped": f"generation {self.staging.generation} is being built"}
            t0 = time.monotonic()
            with self.ctx.freeze(), self._state:  # no writer holds ``_state`` once the gate is closed
                points = self._compact_serving(embedded)
                for service in self.retired.values():
                    _close(service)
                self.retired.clear()
                generations = sorted(set(self.layout.generations_on_disk()) | {self.current})
                for generation in generations:
                    if generation != self.current:
                        points += self._compact_closed(generation, embedded)
            return {"shard": self.shard, "generations": generations, "points": points,
                    "vectors_rebuilt": embedded, "frozen_s": round(time.monotonic() - t0, 4)}

    def _compact_serving(self, embedded: bool) -> int:
        from memcore.stores import edge_compaction, edge_tiers

        served = self.served.get()
        vectors = self.layout.vectors_dir(self.current)
        points = 0
        if embedded:
            points = edge_compaction.write_fresh(vectors, served.embedder.dim, _pages(served))
        fresh = factory.build_keyword_index(self.layout, self.current, fresh=True)
        try:
            self.layout.reindex(served.vectors, fresh)
        finally:
            fresh.close()
        with self.served.closing():  # reads in flight finish first; new ones wait for the reopened stores
            _close(served)
            try:
                if embedded:
                    edge_tiers.swap_in(vectors)  # the fresh copy holds every tier: the tiers go
                self.layout.swap_in_keywords(self.current)
            finally:  # serve again, compacted or (a failure) as it was; a lost keyword index is rebuilt below
                service = self._build(self.current)
                if self.layout.stale(service.vectors, service.keywords):
                    self.layout.reindex(service.vectors, service.keywords)
                self.served.replace(service)
        return points

    def _compact_closed(self, generation: int, embedded: bool) -> int:
        from memcore.stores.edge_tiers import compact_dir

        points = compact_dir(self.layout.vectors_dir(generation), self.served.get().embedder.dim) if embedded else 0
        shutil.rmtree(self.layout.keywords_dir(generation), ignore_errors=True)
        service = self._build(generation)
        self.layout.reindex(service.vectors, service.keywords)
        self.retired[generation] = service
        return points

    # ------------------------------------------------------------------ cleanup
    def abort(self, generation: int) -> dict[str, Any]:
        """Close and delete staging ``generation`` (a failed run); the serving generation is untouched."""
        with self._lock:
            staging = self.staging if self.staging and self.staging.generation == generation else None
            with self._state:  # closed and wiped before :meth:`others` could open it as a retired one
                if staging is not None:
                    self.staging = None
                    _close(staging.service)
                if generation == self.current or generation in self.retired:
                    return {"shard": self.shard, "generation": generation, "removed": False}
                self.layout.wipe(generation)
            return {"shard": self.shard, "generation": generation, "removed": True}

    def drop(self, generation: int) -> dict[str, Any]:
        """Delete an old generation (never the serving or the staging one)."""
        with self._lock:
            if generation == self.current:
                raise ValidationError(f"generation {generation} is the one shard {self.shard} serves",
                                      field="generation")
            if self.staging is not None and self.staging.generation == generation:
                raise ValidationError(f"generation {generation} is being built", field="generation")
            with self._state:
                service = self.retired.pop(generation, None)
                if service is not None:
                    _close(service)
                existed = generation in self.layout.generations_on_disk()
                self.layout.wipe(generation)
            return {"shard": self.shard, "generation": generation, "removed": existed}

    def close(self) -> None:
        with self._lock, self._state:
            if self.staging is not None:
                _close(self.staging.service)
                self.staging = None
            for service in self.retired.values():
                _close(service)
            self.retired.clear()

    # ------------------------------------------------------------------ helpers
    def _staging(self, generation: int) -> _Staging:
        staging = self.staging
        if staging is None or staging.generation != generation:
            raise ValidationError(f"shard {self.shard} is not building generation {generation}", field="generation")
        return staging

    def _copy(self, src: MemoryService, dst: MemoryService, wanted: Callable[[Entry], bool]) -> int:
        copied = 0
        for entries, vectors in _pages(src):
            keep = [i for i, e in enumerate(entries) if self.layout.owns(e.key) and wanted(e)]
            if not keep:
                continue
            picked = [entries[i] for i in keep]
            dst.vectors.upsert(picked, vectors[keep])
            dst.keywords.upsert(picked)
            copied += len(picked)
        return copied


def _pages(service: MemoryService) -> Iterator[tuple[list[Entry], Vectors]]:
    """(entries, vectors) pages of a whole store, tombstones included."""
    return service.vectors.scroll_with_vectors(None, include_deleted=True)


def _chunks(events: list[Event], size: int | None) -> Iterator[list[Event]]:
    if not events:
        return
    if size is None:
        yield events
        return
    for i in range(0, len(events), size):
        yield events[i:i + size]


def _close(service: MemoryService) -> None:
    for part in (service.vectors, service.keywords):
        try:
            part.close()
        except Exception:  # noqa: BLE001 - closing a store that failed already
            pass
