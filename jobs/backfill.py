"""The backfill job: an archive of past sessions → memories, through the running cluster's shards.

A Ray Data pipeline (schema: :mod:`jobs.schema`, docs/archive-format.md)::

    read (JSONL lines | Parquet rows, any pyarrow filesystem URI)
      → validate (a bad row is reported and skipped whole)           map_batches tasks
      → extract (verbatim; or LLM through ray.data.llm's HTTP processor)
      → embed (actor pool, each actor holds the configured embedder)  map_batches, batch_size 256
      → group by (app, user) → write through the user's shard actor   map_groups tasks

The writer orders a user's sessions by their first event (then id) and calls
``ShardCore.backfill`` once per batch of sessions (at most ``write_chunk`` memories), one batch
after the other: each call archives the sessions' turns, adds their entries with the
precomputed vectors and moves each session's cursor to its last event, inside the user's
FIFO. A session is written whole or not at all (an extraction error or a missing chunk skips
it; a failed write stops the user there, so the user's order holds). Idempotent: the archive
insert and the content-addressed entry ids make a re-run write nothing new.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from jobs import extract
from jobs.common import named as _named
from jobs.common import progress, shard_handle, shard_handles, stats_actor
from jobs.schema import RowError, parse_row
from memcore import factory
from memcore.extraction.verbatim import Granularity
from memcore.ids import shard_of
from memcore.model import UserKey
from memcore.ports import Embedder
from memcore.settings import Settings

EmbedderFactory = Callable[[], Embedder]


@dataclass
class BackfillOptions:
    concurrency: int = 1
    """Embedding actors (each holds one embedder)."""
    batch_size: int = 256
    write_chunk: int = 2048
    """At most this many memories per shard call (a user's sessions are split between calls)."""
    llm_concurrency: int = 4
    task_cpus: float = 0.25
    """CPUs each light task (read, validate, extract, write) asks for: they wait on I/O or on the shards,
    and a cluster whose Serve apps hold most CPUs must still schedule them next to the embedders."""
    embed_cpus: float = 1.0
    write_partitions: int | None = None
    """Partitions of the group-by-user shuffle (default: the shard count, at least 2)."""
    progress_s: float = 10.0
    granularity: Granularity | None = None
    """The verbatim granularity (default: the settings' extractor.granularity)."""


@dataclass
class Source:
    """What to read: files/URIs (``fmt`` jsonl | parquet; None: by extension) or rows already in memory."""

    paths: list[str] = field(default_factory=list)
    fmt: str | None = None
    rows: list[dict[str, Any]] | None = None
    label: str = "rows"

    def describe(self) -> str:
        return self.label if self.rows is not None else ", ".join(self.paths)


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
class Validate:
    """``map_batches`` function: raw rows → :data:`extract.SESSION_SCHEMA` rows; bad rows go to the stats."""

    def __init__(self, stats: Any, jsonl: bool) -> None:
        self.stats = stats
        self.jsonl = jsonl

    def __call__(self, batch: pa.Table) -> pa.Table:
        out: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        skipped = turns = 0
        for raw in batch.to_pylist():
            where = str(raw.pop("path", "") or "")
            value: Any = raw.get("text") if self.jsonl else raw
            try:
                row = parse_row(value)
            except RowError as exc:
                failures.append({"source": where, "error": str(exc), "row": _snippet(value)})
                continue
            if row.turns == 0:
                skipped += 1
                continue
            turns += row.turns
            out.append({"app": row.key.app, "user": row.key.user, "session": row.session, "first_ts": row.first_ts,
                        "turns": row.turns, "events": row.events_json(),
                        "names": json.dumps(row.names) if row.names else ""})
        self.stats.add.remote({"sessions": len(out), "turns_read": turns, "skipped": skipped,
                               "failed_rows": len(failures)}, failures)
        return pa.Table.from_pylist(out, schema=extract.SESSION_SCHEMA)


def _snippet(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:200]


class Embed:
    """Actor-pool stage: embeds the ``memory`` units of a batch (other units get a zero row)."""

    def __init__(self, make: EmbedderFactory, expected: dict[str, Any], stats: Any) -> None:
        self.embedder = make()
        self.stats = stats
        if (self.embedder.name, self.embedder.dim) != (expected["name"], expected["dim"]):
            raise ValueError(f"the job's embedder {self.embedder.name} ({self.embedder.dim}) differs from the "
                             f"shards' {expected['name']} ({expected['dim']}): vectors would not match queries")

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        kinds = batch["kind"]
        rows = np.flatnonzero(kinds == "memory")
        vectors = np.zeros((len(kinds), self.embedder.dim), dtype=np.float32)
        if rows.size:
            vectors[rows] = self.embedder.embed_passages([str(t) for t in batch["text"][rows]])
            self.stats.add.remote({"embedded": int(rows.size)})
        return {**batch, "vector": vectors}


class WriteUser:
    """``map_groups`` function: all units of one user → ordered bulk writes through its shard."""

    def __init__(self, settings: Settings, write_chunk: int, stats: Any) -> None:
        self.settings = settings
        self.write_chunk = write_chunk
        self.stats = stats

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import ray

        key = UserKey(app=str(batch["app"][0]), user=str(batch["user"][0]))
        sessions: dict[str, _Session] = {}
        for i in range(len(batch["kind"])):
            name = str(batch["session"][i])
            s = sessions.setdefault(name, _Session(float(batch["first_ts"][i]), int(batch["n_chunks"][i])))
            kind, payload = str(batch["kind"][i]), str(batch["payload"][i])
            if kind == "events":
                s.chunks[int(batch["chunk"][i])] = json.loads(payload)
            elif kind == "error":
                s.errors.append(payload)
            else:
                s.memories.append((int(batch["chunk"][i]), int(batch["pos"][i]), payload, i))
        result = {"sessions_written": 0, "failed_sessions": 0, "turns": 0, "events_new": 0, "entries": 0,
                  "entries_new": 0}
        failures: list[dict[str, Any]] = []
        pending: list[tuple[str, _Session]] = []
        handle = shard_handle(self.settings, shard_of(key, self.settings.shards))
        error = ""

        def flush() -> None:
            events = [(name, [e for c in sorted(s.chunks) for e in s.chunks[c]]) for name, s in pending]
            mems = [m for _, s in pending for m in sorted(s.memories)]
            vectors = batch["vector"][[m[3] for m in mems]] if mems else None
            ack = ray.get(handle.backfill.remote(key, events, [json.loads(m[2]) for m in mems], vectors))
            done = ack.value
            turns = sum(_is_text(e) for _, evs in events for e in evs)
            for name in ("events_new", "entries", "entries_new"):
                result[name] += int(done[name])
            result["sessions_written"] += len(pending)
            result["turns"] += turns
            self.stats.add.remote({"sessions_written": len(pending), "turns_written": turns,
                                   "entries": int(done["entries"])})
            pending.clear()

        ordered = sorted(sessions.items(), key=lambda kv: (kv[1].first_ts, kv[0]))

        def attempt(rest: list[str]) -> str:
            try:
                flush()
                return ""
            except Exception as exc:  # noqa: BLE001 - reported; the user's later sessions wait for a re-run
                why = f"write failed: {type(exc).__name__}: {exc}"[:1000]
                left = [p for p, _ in pending] + rest
                failures.extend({"source": f"{key.app}/{key.user}/{p}", "error": why} for p in left)
                pending.clear()
                return why

        for n, (name, s) in enumerate(ordered):
            if s.errors or len(s.chunks) != s.n_chunks:
                why = "; ".join(s.errors) or f"{len(s.chunks)} of {s.n_chunks} chunks arrived"
                failures.append({"source": f"{key.app}/{key.user}/{name}", "error": why})
                continue
            pending.append((name, s))
            if sum(len(p.memories) for _, p in pending) >= self.write_chunk:
                error = attempt([o for o, _ in ordered[n + 1:]])
                if error:
                    break
        if pending and not error:
            error = attempt([])
        result["failed_sessions"] = len(failures)
        self.stats.add.remote({"users_done": 1, "failed_sessions": len(failures)}, failures)
        return {"app": np.array([key.app]), "user": np.array([key.user]), "error": np.array([error]),
                **{k: np.array([v]) for k, v in result.items()}}


@dataclass
class _Session:
    first_ts: float
    n_chunks: int
    chunks: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    memories: list[tuple[int, int, str, int]] = field(default_factory=list)


def _is_text(event: dict[str, Any]) -> bool:
    return event.get("role") in ("user", "assistant") and bool(str(event.get("content", "")).strip())


# ------------------------------------------------------------------------- driver
def read(source: Source, cpus: float = 1.0) -> tuple[Any, bool]:
    """The raw dataset and whether its rows are JSON lines."""
    import ray

    if source.rows is not None:
        items = [{"text": json.dumps(r, ensure_ascii=False, default=str), "path": f"{source.label}#{i}"}
                 for i, r in enumerate(source.rows)]
        return ray.data.from_items(items), True
    fmt = source.fmt or ("parquet" if all(p.rstrip("/").endswith((".parquet", ".pq")) for p in source.paths)
                         else "jsonl")
    if fmt == "parquet":
        return ray.data.read_parquet(source.paths, include_paths=True, ray_remote_args={"num_cpus": cpus}), False
    if fmt in ("jsonl", "json"):
        # lines, not read_json: one mistyped value must reject its row, not the whole file's block
        return ray.data.read_text(source.paths, include_paths=True, num_cpus=cpus), True
    raise ValueError(f"unknown archive format {fmt!r} (jsonl or parquet)")


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
        granularity = options.granularity or cfg.granularity
        units = sessions.map_batches(_named(extract.VerbatimStage(granularity), "extract_verbatim"), **light)
    expected = ray_get(shard_handle(settings, 0).embedder_info.remote())
    make = embedder_factory or functools.partial(factory.build_embedder, settings.embedder)
    pool = ray.data.ActorPoolStrategy(size=options.concurrency)
    embedded = units.map_batches(Embed, fn_constructor_args=(make, expected, stats), batch_format="numpy",
                                 batch_size=options.batch_size, compute=pool, num_cpus=options.embed_cpus)
    writer = WriteUser(settings, options.write_chunk, stats)
    # few partitions: a partition is a writer task, and the shards are the bottleneck anyway (the
    # default of 200 partitions costs tens of seconds of scheduling on a small cluster)
    partitions = options.write_partitions or max(2, settings.shards)
    return embedded.groupby(["app", "user"], num_partitions=partitions).map_groups(
        _named(writer, "write_user"), batch_format="numpy", num_cpus=options.task_cpus)



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

    options = options or BackfillOptions()
    shard_handles(settings)  # fail early when the cluster's shards are not there
    stats = stats_actor()
    t0 = time.monotonic()
    summary = BackfillSummary()
    log(f"backfill: reading {source.describe()} into {settings.shards} shards (namespace {settings.namespace})")
    error: str | None = None
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
        except Exception as exc:  # noqa: BLE001 - the summary says the run failed, and why
            error = f"{type(exc).__name__}: {str(exc)[:2000]}"
        finally:
            ctx.shuffle_strategy = strategy
    snap = ray_get(stats.snapshot.remote())
    counts = snap["counts"]
    summary.sessions = counts.get("sessions", 0)
    summary.skipped = counts.get("skipped", 0)
    summary.failed_rows = counts.get("failed_rows", 0)
    summary.failed_sessions = counts.get("failed_sessions", 0)
    summary.failures = snap["failures"]
    summary.wall_s = time.monotonic() - t0
    if error is not None:
        summary.error = error
        summary.failures.append({"source": "job", "error": error})
        summary.failed_sessions += max(0, summary.sessions - summary.sessions_written - summary.failed_sessions)
    for f in summary.failures[:20]:
        log(f"  failed: {f.get('source', '?')}: {f['error']}")
    log(summary.render())
    return summary


def _render_progress(snap: dict[str, Any]) -> str:
    c = snap["counts"]
    elapsed = max(snap["elapsed_s"], 1e-9)
    return (f"backfill [{elapsed:.0f}s]: {c.get('sessions', 0)} sessions read ({c.get('failed_rows', 0)} bad rows, "
            f"{c.get('skipped', 0)} skipped), {c.get('embedded', 0)} memories embedded, "
            f"{c.get('sessions_written', 0)} sessions / {c.get('entries', 0)} entries written, "
            f"{c.get('turns_written', 0) / elapsed:.1f} turns/s")

