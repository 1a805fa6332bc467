"""Change the shard count of an embedded data directory offline (``memctl reshard --shards M``).

With embedded stores every user lives in one shard directory, ``shards/<shard_of(key, N)>/`` (Qdrant
Edge entries, Tantivy index, ``archive.sqlite3``, ``seq.sqlite3``; :mod:`memcore.layout`). A re-shard
moves every user to ``shard_of(key, M)`` (:func:`memcore.ids.shard_of`, the routing rule) through the
ports: entries with their stored vectors and payloads (tombstones included) through
:class:`memcore.ports.VectorStore`, the user's archive rows (turns in every state, session cursors,
extraction jobs in every status, in ingest order, access times, the write counter, the knowledge graph and
the diary) through
:meth:`memcore.archive_ports.EventArchive.export_user` / ``import_users``; then each new shard's keyword index is
rebuilt from its vector store (:meth:`memcore.layout.ShardLayout.reindex`).

Crash safety (:mod:`memcore.data_root` names the files). Nothing of the old directories is changed until
the end:

1. ``reshard.json`` (the plan: from N, to M, phase ``copy``) is written, under the data directory's
   exclusive lock (no shard runs: each holds it shared; no shard starts while the plan exists);
2. *copy*: the M new shard directories are written under ``reshard/shards/``; each user moved is
   appended to ``reshard/done.log`` (fsynced) after its target holds it; a user is copied again when
   a crash came before its line (both writes replace the user's rows: idempotent). Then the keyword
   indexes are rebuilt and the totals checked (entries, turns, jobs, users: the same before and
   after), and the plan's phase becomes ``switch``;
3. *switch*: ``shards/`` is renamed to ``reshard/retired/``, ``reshard/shards/`` to ``shards/`` (each
   rename fsynced; a rerun sees which is done), the count file ``shard-count`` is set to M, the
   work directory and then the plan are deleted.

A run killed at any point is completed by running the same command again: before the switch the old
directories are whole and in use, after the first rename the new ones are whole; a user is in exactly
one shard of either set. Users are copied in groups (:data:`cluster.reshard_stores.GROUP_ENTRIES`: one
flush of each target store, one archive transaction per target, one fsync of the log). ``MEMCTL_RESHARD_CRASH_AT``
(tests) kills the process with SIGKILL at a named point: ``written:<n>`` (the n-th group of this run is in
its targets, not yet in the log), ``user:<n>`` (the n-th user of this run is logged), ``copied``,
``retired``, ``placed``, ``recorded``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from typing import IO, Any

from cluster.reshard_stores import SourceShard, Tally, TargetShards, groups
from memcore import factory
from memcore.data_root import DataRoot, fsync_dir, hold_exclusive, write_atomic
from memcore.layout import ShardLayout
from memcore.settings import Settings

CRASH_ENV = "MEMCTL_RESHARD_CRASH_AT"
DONE_LOG, STAGED, RETIRED = "done.log", "shards", "retired"


class ReshardRefused(Exception):
    """The re-shard cannot run now (memcluster runs on the directory, another re-shard is unfinished, a
    shard is not in a state to be moved); nothing was changed."""


@dataclass
class Summary:
    data_dir: str
    from_shards: int
    to_shards: int
    users: int = 0
    entries: int = 0
    turns: int = 0
    jobs: int = 0
    resumed: bool = False
    seconds: float = 0.0
    per_shard: list[int] = field(default_factory=list)
    """Entries (tombstones included) in each new shard."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _into(tally: Tally, summary: Summary) -> None:
    summary.users, summary.entries = len(tally.keys), sum(tally.per_shard)
    summary.turns, summary.jobs, summary.per_shard = tally.turns, tally.jobs, list(tally.per_shard)


def _crash_point(name: str) -> None:
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _plan(root: DataRoot, data: dict[str, Any]) -> None:
    write_atomic(root.plan_file, json.dumps(data, sort_keys=True) + "\n")


class Reshard:
    """One re-shard of ``settings.data_dir`` to ``target`` shards (``run`` does it all, or finishes it)."""

    def __init__(self, settings: Settings, target: int, *, progress: Callable[[str], None] = lambda _: None) -> None:
        if settings.vector_store.backend != "edge":
            raise ValueError("reshard moves embedded shard directories; with the Qdrant server backend the entries "
                             "do not move: restart the cluster with the new `shards` value")
        if target < 1:
            raise ValueError(f"--shards must be at least 1 (got {target})")
        self.settings = settings
        self.target = target
        self.root = DataRoot.of(settings)
        self.progress = progress
        self.staged_root = self.root.work_dir  # ``<work>/shards/<k>``: a data dir of its own for the layouts

    # ---------------------------------------------------------------- layouts
    def _old(self, shards: int, k: int) -> ShardLayout:
        return ShardLayout(self.settings.model_copy(update={"shards": shards}), k)

    def _new(self, k: int) -> ShardLayout:
        return ShardLayout(self.settings.model_copy(update={"shards": self.target, "data_dir": self.staged_root}), k)

    # ------------------------------------------------------------------- run
    def run(self) -> Summary:
        if not self.root.path.is_dir():
            raise ValueError(f"{self.root.path} is not a data directory")
        lock = hold_exclusive(self.root)
        if lock is None:
            raise ReshardRefused(f"{self.root.path} is in use: memcluster runs on it (its shards hold "
                                 f"{self.root.lock_file}); stop it with `memctl down`, then run reshard again")
        try:
            return self._run_locked()
        finally:
            lock.close()

    def _run_locked(self) -> Summary:
        t0 = time.perf_counter()
        plan = self.root.pending_plan()
        if plan is not None:
            if plan.get("to") != self.target:
                raise ReshardRefused(f"{self.root.path}: a change of the shard count to {plan.get('to')} is "
                                     f"unfinished; finish it first with `memctl reshard --shards {plan.get('to')}`")
            summary = Summary(str(self.root.path), int(plan["from"]), self.target, resumed=True)
        else:
            current = self.root.recorded()
            if current is None:
                raise ValueError(f"{self.root.path} holds no shards (nothing to reshard)")
            if current == self.target:
                raise ValueError(f"{self.root.path} already has {current} shards")
            self._check_movable(current)
            shutil.rmtree(self.root.work_dir, ignore_errors=True)  # leftovers of a run that never wrote its plan
            self.root.work_dir.mkdir(parents=True)
            plan = {"from": current, "to": self.target, "phase": "copy", "started_at": time.time()}
            _plan(self.root, plan)
            summary = Summary(str(self.root.path), current, self.target)
        if plan["phase"] == "copy":
            self._copy(summary)
            _crash_point("copied")
            plan = {**plan, "phase": "switch"}
            _plan(self.root, plan)
        else:
            self._count(summary)
        self._switch()
        summary.seconds = round(time.perf_counter() - t0, 3)
        return summary

    def _check_movable(self, current: int) -> None:
        """Refuse shards that hold more than the generation they serve, or that a crash left mid-write."""
        for k in self.root.shard_dirs():
            layout = self._old(current, k)
            serving = factory.current_generation(layout)
            others = [g for g in layout.generations_on_disk() if g != serving]
            if others:
                raise ReshardRefused(f"shard {k} holds generations {others} besides the one it serves ({serving}): "
                                     "drop them first (`memctl reextract --list`, `--drop-generation N`)")
            if layout.dirty_marker.exists():
                raise ReshardRefused(f"shard {k} was stopped in the middle of a write ({layout.dirty_marker}): start "
                                     "memcluster on this directory once (the shard repairs itself), stop it, then "
                                     "run reshard again")
        if self.root.shard_dirs() != list(range(current)):
            raise ReshardRefused(f"{self.root.shards_dir} holds shard directories {self.root.shard_dirs()}, "
                                 f"not 0..{current - 1}")

    # ------------------------------------------------------------------ copy
    def _done(self) -> set[tuple[int, str, str]]:
        path = self.root.work_dir / DONE_LOG
        if not path.exists():
            return set()
        done: set[tuple[int, str, str]] = set()
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:  # a line the crash cut short: that user is copied again
                continue
            done.add((int(row["shard"]), row["app"], row["user"]))
        return done

    def _copy(self, summary: Summary) -> None:
        done = self._done()
        owner = {(app, user): k for k, app, user in done}
        moved = written = 0
        before = Tally()
        with ExitStack() as stack:
            targets = TargetShards(self.target, self._new, stack, clean=summary.resumed)
            log: IO[str] = stack.enter_context((self.root.work_dir / DONE_LOG).open("a", encoding="utf-8"))
            for k in range(summary.from_shards):
                with SourceShard(self._old(summary.from_shards, k)) as src:
                    keys = src.keys()
                    before.add(src.vectors, src.archive, keys)
                    for key in keys:
                        if owner.setdefault((key.app, key.user), k) != k:
                            raise ReshardRefused(
                                f"user {key.user!r} of app {key.app!r} has data in shards {owner[(key.app, key.user)]} "
                                f"and {k} (the directory was started with another shard count before the count "
                                "was recorded): export and import that app instead (docs/deployment.md, section 5)")
                    todo = [key for key in keys if (k, key.app, key.user) not in done]
                    for group in groups(todo, src):
                        targets.put(group, src)
                        written += 1
                        _crash_point(f"written:{written}")
                        log.writelines(json.dumps({"shard": k, "app": key.app, "user": key.user}) + "\n"
                                       for key in group)
                        log.flush()
                        os.fsync(log.fileno())
                        first, moved = moved + 1, moved + len(group)
                        for n in range(first, moved + 1):
                            _crash_point(f"user:{n}")
                    self.progress(f"shard {k}: {len(keys)} users ({len(keys) - len(todo)} moved before)")
            targets.reindex()
            after = targets.tally()
        if before.counts() != after.counts():
            raise RuntimeError(f"reshard: the new shards hold {after.counts()}, the old ones {before.counts()}; "
                               f"nothing was switched (the old shards are untouched; delete {self.root.plan_file} and "
                               f"{self.root.work_dir} to abandon this run)")
        _into(after, summary)

    def _count(self, summary: Summary) -> None:
        """Totals of the new shards (staged, or in place after the switch): a run resumed in its switch."""
        base = self.root.work_dir / STAGED
        settings = self.settings.model_copy(update={"shards": self.target})
        layouts = [self._new(k) if base.exists() else ShardLayout(settings, k) for k in range(self.target)]
        tally = Tally()
        for layout in layouts:
            with SourceShard(layout) as src:
                tally.add(src.vectors, src.archive, src.keys())
        _into(tally, summary)

    # ---------------------------------------------------------------- switch
    def _switch(self) -> None:
        work, shards = self.root.work_dir, self.root.shards_dir
        staged, retired = work / STAGED, work / RETIRED
        if staged.exists() and shards.exists() and not retired.exists():
            os.replace(shards, retired)
            fsync_dir(self.root.path)
            fsync_dir(work)
            _crash_point("retired")
        if staged.exists() and not shards.exists():
            os.replace(staged, shards)
            fsync_dir(self.root.path)
            fsync_dir(work)
            _crash_point("placed")
        if not shards.exists():
            raise RuntimeError(f"reshard: neither {shards} nor {staged} exists; the old shards are in {retired}")
        self.root.record(self.target)
        _crash_point("recorded")
        shutil.rmtree(work, ignore_errors=True)  # a run killed while deleting it finds part of it, or none
        self.root.plan_file.unlink()
        fsync_dir(self.root.path)
        self.progress(f"{self.root.path}: {self.target} shards")
