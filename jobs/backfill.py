"""The backfill job: an archive of past sessions → memories, through the running cluster's shards.

A Ray Data pipeline (schema: :mod:`jobs.schema`, docs/archive-format.md)::

    read (JSONL lines | Parquet rows, any pyarrow filesystem URI)
      → validate (a bad row is reported and skipped whole)             map_batches tasks
      → extract (verbatim; or LLM through ray.data.llm's HTTP processor)
      → group by (app, user)  (light rows: texts, no vectors yet)      sort shuffle
      → embed + write (actor pool, each actor holds the configured     map_groups, one user per call
        embedder; batches of 256; the user's shard actor writes)

The embed+write stage orders a user's sessions by their first event (then id) and calls
``ShardCore.backfill`` once per batch of whole sessions (``write_chunk`` memories or more), one
batch after the other, embedding the next batch while the shard writes the previous one:
each call archives the sessions' turns, adds their entries with the precomputed vectors and
moves each session's cursor to its last event, inside the user's FIFO. Grouping before
embedding keeps the shuffle light and lets writes overlap embedding (no barrier in between).
A session is written whole or not at all (an extraction error or a missing chunk skips it; a
failed write stops the user there, so the user's order holds). Idempotent: the archive insert
and the content-addressed entry ids make a re-run write nothing new.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from actors.shard_client import Pending
from jobs import extract
from jobs.common import cluster_shards, progress, stats_actor
from jobs.common import named as _named
from jobs.source import Source, Validate, read
from memcore import factory
from memcore.model import UserKey
from memcore.ports import Embedder
from memcore.settings import Settings
from memcore.vocabulary import Granularity

EmbedderFactory = Callable[[], Embedder]
__all__ = ["BackfillOptions", "BackfillSummary", "EmbedWrite", "Source", "build", "run_backfill"]


@dataclass
class BackfillOptions:
    concurrency: int = 1
    """Embedding actors (each holds one embedder)."""
    batch_size: int = 256
    write_chunk: int = 256
    """A shard call carries whole sessions, at least this many memories (unless the user has fewer): the next
    batch is embedded while the shard writes this one."""
    llm_concurrency: int = 4
    task_cpus: float = 0.25
    """CPUs each light task (read, validate, extract, write) asks for: they wait on I/O or on the shards,
    and a cluster whose Serve apps hold most CPUs must still schedule them next to the embedders."""
    embed_cpus: float = 1.0
    write_partitions: int | None = None
    """Partitions of the group-by-user shuffle (default: the embedding actors, at least 2)."""
    progress_s: float = 10.0
    granularity: Granularity | None = None
    """The verbatim granularity (default: the settings' extractor.backfill_granularity, else extractor.granularity)."""


@dataclass
class BackfillSummary:
    sessions: int = 0
    sessions_written: int = 0
    turns: int = 0
    entries: int = 0
    entries_new: int = 0
    events_new: int = 0
    users: int = 0
    skipped: int = 0
    failed_rows: int = 0
    failed_sessions: int = 0
    wall_s: float = 0.0
    error: str | None = None
    """Why the run stopped, when it did (the pipeline failed; rows written before stay: re-run it)."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds from the start: first/last embedding batch, first/last write."""
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def turns_per_s(self) -> float:
        return self.turns / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.failed_rows == 0 and self.failed_sessions == 0

    def as_dict(self) -> dict[str, Any]:
        return {**{k: v for k, v in self.__dict__.items() if k != "failures"},
                "turns_per_s": round(self.turns_per_s, 2), "failures": self.failures}

    def render(self) -> str:
        return (f"backfill: {self.sessions_written}/{self.sessions} sessions of {self.users} users, "
                f"{self.turns} turns, {self.entries} entries ({self.entries_new} new), "
                f"{self.skipped} skipped, {self.failed_rows} failed rows, {self.failed_sessions} failed sessions, "
                f"{self.wall_s:.1f} s, {self.turns_per_s:.1f} turns/s")


# ------------------------------------------------------------------------- stages
class EmbedWrite:
    """Actor-pool stage (``map_groups``): all units of one user → embedded and written through its shard.

    Each actor holds one embedder. A user's sessions go oldest first, in write batches of whole
    sessions (at least ``write_chunk`` memories, unless the user has fewer); the batch's memories
    are embedded (``batch_size`` at a time) while the shard still writes the previous batch: one
    write of the user in flight at a time, so the shard sees the user's batches in order.
    """

    def __init__(self, settings: Settings, make: EmbedderFactory, expected: dict[str, Any], write_chunk: int,
                 batch_size: int, stats: Any) -> None:
        self.embedder = make()
        if (self.embedder.name, self.embedder.dim) != (expected["name"], expected["dim"]):
            raise ValueError(f"the job's embedder {self.embedder.name} ({self.embedder.dim}) differs from the "
                             f"shards' {expected['name']} ({expected['dim']}): vectors would not match queries")
        self.settings = settings
        self.shards = cluster_shards(settings)
        self.write_chunk = write_chunk
        self.batch_size = batch_size
        self.stats = stats

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        key = UserKey(app=str(batch["app"][0]), user=str(batch["user"][0]))
        sessions = _sessions(batch)
        failures: list[dict[str, Any]] = []
        ready: list[tuple[str, _Session]] = []
        for name, s in sorted(sessions.items(), key=lambda kv: (kv[1].first_ts, kv[0])):
            if s.errors or len(s.chunks) != s.n_chunks:
                why = "; ".join(s.errors) or f"{len(s.chunks)} of {s.n_chunks} chunks arrived"
                failures.append({"source": f"{key.app}/{key.user}/{name}", "error": why})
            else:
                ready.append((name, s))
        batches: list[list[tuple[str, _Session]]] = [[]]
        for item in ready:
            if sum(len(s.memories) for _, s in batches[-1]) >= self.write_chunk:
                batches.append([])
            batches[-1].append(item)
        result = dict.fromkeys(("sessions_written", "turns", "events_new", "entries", "entries_new"), 0)
        in_flight: tuple[Pending[dict[str, int]], list[tuple[str, _Session]], int] | None = None
        error = ""
        batches = [b for b in batches if b]
        for n, part in enumerate(batches):
            call = self._prepare(key, part, batch["payload"])
            if in_flight is not None:
                error = self._settle(in_flight, result)
                if error:
                    left = [name for name, _ in in_flight[1]] + [name for b in batches[n:] for name, _ in b]
                    failures += [{"source": f"{key.app}/{key.user}/{p}", "error": error} for p in left]
                    in_flight = None
                    break
            in_flight = (self.shards.backfill(*call[:4]), part, call[4])
        if in_flight is not None:
            error = self._settle(in_flight, result)
            if error:
                failures += [{"source": f"{key.app}/{key.user}/{p}", "error": error} for p, _ in in_flight[1]]
        self.stats.add.remote({"users_done": 1, "failed_sessions": len(failures)}, failures)
        return {"app": np.array([key.app]), "user": np.array([key.user]), "error": np.array([error]),
                "failed_sessions": np.array([len(failures)]), **{k: np.array([v]) for k, v in result.items()}}

    def _prepare(self, key: UserKey, part: list[tuple[str, _Session]], payloads: np.ndarray) -> tuple[Any, ...]:
        """The shard call's arguments (the batch's memories embedded now) and the batch's turn count."""
        events = [(name, _merged(s)) for name, s in part]
        mems = [json.loads(str(payloads[m[2]])) for _, s in part for m in sorted(s.memories)]
        vectors = None
        if mems:
            texts = [m["text"] for m in mems]
            vectors = np.concatenate([self.embedder.embed_passages(texts[i:i + self.batch_size])
                                      for i in range(0, len(texts), self.batch_size)])
            self.stats.add.remote({"embedded": len(texts)})
        turns = sum(_is_text(e) for _, evs in events for e in evs)
        return key, events, mems, vectors, turns

    def _settle(self, in_flight: tuple[Pending[dict[str, int]], list[tuple[str, _Session]], int],
                result: dict[str, int]) -> str:
        """Wait for a write; count it, or return why it failed (the user's later batches are not sent)."""
        pending, part, turns = in_flight
        try:
            done, _ = pending.result()
        except Exception as exc:  # noqa: BLE001 - reported; the user's later sessions wait for a re-run
            cause = getattr(exc, "cause", None) or exc
            return f"write failed: {type(cause).__name__}: {cause}"[:1000]
        for name in ("events_new", "entries", "entries_new"):
            result[name] += int(done[name])
        result["sessions_written"] += len(part)
        result["turns"] += turns
        self.stats.add.remote({"sessions_written": len(part), "turns_written": turns,
                               "entries": int(done["entries"])})
        return ""


def _sessions(batch: dict[str, np.ndarray]) -> dict[str, _Session]:
    """The units of one user by session (a session given in two rows merges)."""
    sessions: dict[str, _Session] = {}
    for i in range(len(batch["kind"])):
        name = str(batch["session"][i])
        s = sessions.setdefault(name, _Session(float(batch["first_ts"][i]), int(batch["n_chunks"][i])))
        s.first_ts = min(s.first_ts, float(batch["first_ts"][i]))
        kind = str(batch["kind"][i])
        if kind == "events":
            s.chunks.setdefault(int(batch["chunk"][i]), []).extend(json.loads(str(batch["payload"][i])))
        elif kind == "error":
            s.errors.append(str(batch["payload"][i]))
        else:
            s.memories.append((int(batch["chunk"][i]), int(batch["pos"][i]), i))
    return sessions


@dataclass
class _Session:
    first_ts: float
    n_chunks: int
    chunks: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    memories: list[tuple[int, int, int]] = field(default_factory=list)
    """(chunk, position, row) of each memory unit."""


def _merged(session: _Session) -> list[dict[str, Any]]:
    """The session's events in chunk order, each id once (its first occurrence); the archive orders by time."""
    seen: set[str] = set()
    out = []
    for c in sorted(session.chunks):
        for e in session.chunks[c]:
            if e["id"] not in seen:
                seen.add(e["id"])
                out.append(e)
    return out


def _is_text(event: dict[str, Any]) -> bool:
    return event.get("role") in ("user", "assistant") and bool(str(event.get("content", "")).strip())


# ------------------------------------------------------------------------- driver
def build(settings: Settings, source: Source, options: BackfillOptions, stats: Any,
          embedder_factory: EmbedderFactory | None = None) -> Any:
    """The whole pipeline as a lazy Dataset of per-user write results."""
    import ray

    raw, jsonl = read(source, options.task_cpus)
    light = {"batch_format": "pyarrow", "batch_size": 64, "num_cpus": options.task_cpus}
    sessions = raw.map_batches(_named(Validate(stats, jsonl), "validate"), **light)
    cfg = settings.extractor
    if cfg.base_url:
        chunks = sessions.map_batches(extract.chunk_sessions, **light)
        answered = extract.llm_processor(cfg, options.llm_concurrency)(chunks)
        units = answered.map_batches(extract.llm_units, **light)
    else:
        granularity = options.granularity or cfg.backfill_granularity or cfg.granularity
        stage = extract.VerbatimStage(granularity, cfg.window)
        units = sessions.map_batches(_named(stage, "extract_verbatim"), **light)
    expected = cluster_shards(settings).embedder_info(0)
    make = embedder_factory or functools.partial(factory.build_embedder, settings.embedder)
    # group the light unit rows (no vectors yet) by user; few partitions: the default of 200 costs
    # tens of seconds of scheduling on a small cluster, and the embedders are the bottleneck
    partitions = options.write_partitions or max(2, options.concurrency)
    return units.groupby(["app", "user"], num_partitions=partitions).map_groups(
        EmbedWrite, fn_constructor_args=(settings, make, expected, options.write_chunk, options.batch_size, stats),
        compute=ray.data.ActorPoolStrategy(size=options.concurrency), batch_format="numpy",
        num_cpus=options.embed_cpus)


SHUFFLE_TASK_CPUS = 1.0
"""What Ray Data's group-by shuffle tasks ask for (its default; the job cannot set it)."""


def fit_cpus(options: BackfillOptions, free_cpus: float, log: Callable[[str], None] = print) -> BackfillOptions:
    """Shrink the embedding actors' CPU request so a shuffle task still fits beside them.

    The actor pool starts first and holds its CPUs for the whole run; on a small cluster whose
    Serve apps hold the rest (``memctl up`` on a 2-core laptop: 1.4 CPUs free), a full CPU per
    embedder would leave no room for the group-by's 1-CPU tasks and the job would wait forever.
    The embedders still use their threads; the request only reserves scheduling room.
    """
    room = free_cpus - SHUFFLE_TASK_CPUS - options.task_cpus
    wanted = options.embed_cpus * options.concurrency
    if wanted <= room:
        return options
    per_actor = max(0.05, round(room / options.concurrency, 2)) if room > 0 else 0.05
    log(f"backfill: {free_cpus:g} CPUs free: each embedding actor asks for {per_actor:g} CPU instead of "
        f"{options.embed_cpus:g} so the group-by tasks fit beside them")
    return replace(options, embed_cpus=per_actor)


def ray_get(ref: Any) -> Any:
    import ray

    return ray.get(ref)


def run_backfill(
    settings: Settings,
    source: Source,
    options: BackfillOptions | None = None,
    *,
    embedder_factory: EmbedderFactory | None = None,
    log: Callable[[str], None] = print,
) -> BackfillSummary:
    """Run the backfill in the connected Ray cluster; returns (and logs) the summary."""
    import ray
    from ray.data.context import ShuffleStrategy

    options = fit_cpus(options or BackfillOptions(), ray.available_resources().get("CPU", 0.0), log)
    shards = cluster_shards(settings)
    for k in shards.shards:  # fail early when the cluster's shards are not there
        shards.ping(k)
    stats = stats_actor("backfill", settings.namespace, time.time())
    t0 = time.monotonic()
    summary = BackfillSummary()
    log(f"backfill: reading {source.describe()} into {settings.shards} shards (namespace {settings.namespace})")
    error: str | None = None
    written_failed = 0
    ctx = ray.data.DataContext.get_current()
    strategy = ctx.shuffle_strategy
    # the pull-based sort shuffle groups users without the hash shuffle's aggregator actors
    # (measured: LoCoMo's group-by ~2 s instead of ~5 s on a 2-CPU cluster)
    ctx.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    with progress(stats, _render_progress, log, options.progress_s):
        try:
            for row in build(settings, source, options, stats, embedder_factory).iter_rows():
                summary.users += 1
                summary.sessions_written += int(row["sessions_written"])
                summary.turns += int(row["turns"])
                summary.entries += int(row["entries"])
                summary.entries_new += int(row["entries_new"])
                summary.events_new += int(row["events_new"])
                written_failed += int(row["failed_sessions"])
        except Exception as exc:  # noqa: BLE001 - the summary says the run failed, and why
            error = f"{type(exc).__name__}: {str(exc)[:2000]}"
        finally:
            ctx.shuffle_strategy = strategy
    snap = ray_get(stats.snapshot.remote())
    deadline = time.monotonic() + 10  # the stages report without waiting: let their last reports land
    while snap["counts"].get("users_done", 0) < summary.users and time.monotonic() < deadline:
        time.sleep(0.05)
        snap = ray_get(stats.snapshot.remote())
    counts = snap["counts"]
    summary.sessions = counts.get("sessions", 0)
    summary.skipped = counts.get("skipped", 0)
    summary.failed_rows = counts.get("failed_rows", 0)
    summary.failed_sessions = max(written_failed, counts.get("failed_sessions", 0))
    summary.failures = snap["failures"]
    summary.wall_s = time.monotonic() - t0
    times = snap["times"]
    for label, name in (("embedding", "embedded"), ("writes", "sessions_written")):
        if name in times:
            summary.phases[f"{label}_first_s"], summary.phases[f"{label}_last_s"] = times[name]
    if error is not None:
        summary.error = error
        summary.failures.append({"source": "job", "error": error})
        summary.failed_sessions += max(0, summary.sessions - summary.sessions_written - summary.failed_sessions)
    for f in summary.failures[:20]:
        log(f"  failed: {f.get('source', '?')}: {f['error']}")
    ray_get(stats.finish.remote("ok" if error is None else "failed", summary.wall_s))
    log(summary.render())
    return summary


def _render_progress(snap: dict[str, Any]) -> str:
    c = snap["counts"]
    elapsed = max(snap["elapsed_s"], 1e-9)
    return (f"backfill [{elapsed:.0f}s]: {c.get('sessions', 0)} sessions read ({c.get('failed_rows', 0)} bad rows, "
            f"{c.get('skipped', 0)} skipped), {c.get('embedded', 0)} memories embedded, "
            f"{c.get('sessions_written', 0)} sessions / {c.get('entries', 0)} entries written, "
            f"{c.get('turns_written', 0) / elapsed:.1f} turns/s")

