"""Extraction-job benchmark: job overhead per turn excluding model time, and ingest-to-searchable latency.

    python -m bench.extraction                         # both extractors, data on disk and on tmpfs
    python -m bench.extraction --jobs 20 --storage disk --embedder hashing   # quick run

One shard (:class:`actors.shard.ShardCore`, real engines: Qdrant Edge, Tantivy, SQLite archive),
one user, jobs run one at a time (no queueing effects). Each job is one new round of a session
(a user turn and the assistant's reply: consecutive LoCoMo-10 turns, evaluation use only),
ingested as the whole session so far.

- ``verbatim``: the default extractor (no model): two ``add`` operations per job (turn granularity).
- ``llm``: the LLM extractor through the real ``openai`` client against the scripted
  OpenAI-compatible server of the tests, answering after a fixed delay (``--delay-ms``) with one
  ``memory_add``; ``merge_similar`` policy (existing-memory search + reconcile search included).

Per job: ``model`` = wall time of the extractor call (HTTP + the fixed delay; ~0 for verbatim),
``writes`` / ``searches`` = time inside MemoryService writes / searches (instrumented from the
outside), ``job`` = ingest call start → job finished (archive, queue hand-off, worker, cursor).
``overhead`` = job − model, per turn = / 2 (two turns per job). ``ingest→searchable`` = ingest
call start → a hybrid search with the user turn returns the job's new entry (job polled every
1 ms). A job whose only memory reconcile judged a duplicate has nothing new to find: it is
counted (``jobs_without_new_entry``) and left out of the latencies.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.extraction.report import plot, write_markdown
from bench.harness.cli import parser
from bench.harness.locomo import load_locomo
from bench.harness.report import RESULTS, machine_info, write_json
from bench.harness.timing import Stopwatch, instrumented, percentiles
from memcore.extraction.events import ExtractionResult
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.ports import Extractor

T0 = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)


def dialogue(rounds: int) -> list[tuple[str, str]]:
    """(user text, assistant text) pairs: consecutive turns of LoCoMo-10 (evaluation use only)."""
    turns, _ = load_locomo()
    texts = [t.turn.text for t in turns]
    return [(texts[2 * r], texts[2 * r + 1]) for r in range(rounds)]


class TimedExtractor(ExtractorWrapper):
    """Wraps an extractor and accumulates the wall time of its ``extract`` calls."""

    def __init__(self, inner: Extractor) -> None:
        super().__init__(inner)
        self.watch = Stopwatch()

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        with self.watch:
            return extract()


def session_events(pairs: Sequence[tuple[str, str]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r, (user, assistant) in enumerate(pairs):
        t = T0 + timedelta(minutes=2 * r)
        out.append({"id": f"u{r}", "role": "user", "timestamp": t.isoformat(), "content": user})
        out.append({"id": f"a{r}", "role": "assistant", "timestamp": (t + timedelta(seconds=20)).isoformat(),
                    "content": assistant})
    return out


def llm_answer(request: dict[str, Any]) -> Any:
    """One memory_add with the (last) user turn of the new conversation."""
    from testkit.scripted_llm import messages_text, tool_call

    text = messages_text(request, "user").split("New conversation", 1)[-1]
    said = [x.split(": ", 1)[-1] for x in text.splitlines() if "] User: " in x][-1]
    return [tool_call("memory_add", {"memory": f"The user said: {said}", "topics": ["chat"]})]


def run_scenario(kind: str, *, jobs: int, delay_ms: float, data_dir: Path, embedder: Any,
                 embedder_kind: str) -> dict[str, Any]:
    from actors.shard import ShardCore
    from memcore.extraction.factory import build_extractor
    from memcore.model import UserKey
    from memcore.service import MemoryService
    from memcore.settings import Settings
    from testkit.scripted_llm import Reply, ScriptedLLM

    key = UserKey(app="bench", user="u1")
    llm = None
    extractor_cfg: dict[str, Any] = {}
    if kind == "llm":
        delay = delay_ms / 1000.0
        llm = ScriptedLLM([lambda req: Reply(tool_calls=tuple(llm_answer(req)), delay=delay)] * (jobs + 5),
                          no_delay=True)
        llm.start()
        extractor_cfg = {"base_url": llm.base_url, "model": "scripted"}
    settings = Settings.model_validate({"data_dir": data_dir, "shards": 1, "embedder": {"kind": embedder_kind},
                                        "extractor": extractor_cfg})
    inner = build_extractor(settings.extractor)
    timed = TimedExtractor(inner)
    core = ShardCore(settings, 0, embedder, extractor=timed)
    writes, searches = Stopwatch(), Stopwatch()
    rows: list[dict[str, float]] = []
    skipped = 0
    try:
        with instrumented([(MemoryService, "add_many", writes), (MemoryService, "update", writes),
                           (MemoryService, "search", searches)]):
            pairs = dialogue(jobs + 2)
            for r in range(jobs + 2):  # two warm-up jobs
                before = (timed.watch.seconds, writes.seconds, searches.seconds)
                events = session_events(pairs[: r + 1])
                t0 = time.perf_counter()
                job = core.ingest(key, "bench-session", events)
                t_ingest = time.perf_counter()
                while not core.job(job.job_id).finished:
                    time.sleep(0.001)
                t_done = time.perf_counter()
                final = core.job(job.job_id)
                assert final.status == "done", final
                new_ids = {o["effective_id"] for o in final.operations if o["status"] == "applied"}
                searches_before_probe = searches.seconds
                hits = core.service.search(key, {"query": pairs[r][0], "max_results": 10})
                t_found = time.perf_counter()
                searches.seconds = searches_before_probe  # the probe is not part of the job
                if not new_ids:
                    skipped += 1  # reconcile judged the memory a duplicate: nothing new to find
                    continue
                assert new_ids & {h.entry.id for h in hits}, (r, final.operations)
                if r < 2:
                    continue
                model = timed.watch.seconds - before[0]
                job_s = t_done - t0
                rows.append({
                    "ingest_call_ms": (t_ingest - t0) * 1e3,
                    "job_ms": job_s * 1e3,
                    "model_ms": model * 1e3,
                    "writes_ms": (writes.seconds - before[1]) * 1e3,
                    "searches_ms": (searches.seconds - before[2]) * 1e3,
                    "overhead_ms": (job_s - model) * 1e3,
                    "overhead_per_turn_ms": (job_s - model) * 1e3 / 2,
                    "ingest_to_searchable_ms": (t_found - t0) * 1e3,
                })
    finally:
        core.close()
        if llm is not None:
            llm.close()
    stats: dict[str, Any] = {name: percentiles([row[name] for row in rows]) for name in rows[0]}
    machinery = [row["overhead_ms"] - row["writes_ms"] - row["searches_ms"] for row in rows]
    stats["machinery_ms"] = percentiles(machinery)
    stats["jobs_without_new_entry"] = skipped
    return stats


def main(argv: Sequence[str] | None = None) -> int:
    ap = parser(__name__, __doc__)
    ap.add_argument("--jobs", type=int, default=40)
    ap.add_argument("--delay-ms", type=float, default=50.0)
    ap.add_argument("--embedder", choices=["minilm", "hashing"], default="minilm")
    ap.add_argument("--storage", nargs="+", choices=["disk", "tmpfs"], default=["disk", "tmpfs"])
    ap.add_argument("--out", type=Path, default=RESULTS / "extraction.json")
    args = ap.parse_args(argv)

    from memcore.factory import build_embedder
    from memcore.settings import EmbedderSettings

    embedder = build_embedder(EmbedderSettings(kind=args.embedder, dim=256 if args.embedder == "hashing" else None))
    embedder.embed_passages(["warm up"])
    roots = {"disk": None, "tmpfs": "/dev/shm"}
    results: dict[str, Any] = {}
    for storage in args.storage:
        for kind in ("verbatim", "llm"):
            with tempfile.TemporaryDirectory(prefix="bench-extraction-", dir=roots[storage]) as tmp:
                name = f"{kind}/{storage}"
                print(f"{name}: {args.jobs} jobs ...", flush=True)
                results[name] = run_scenario(kind, jobs=args.jobs, delay_ms=args.delay_ms, data_dir=Path(tmp),
                                             embedder=embedder, embedder_kind=args.embedder)
    report = {
        "benchmark": "extraction",
        "config": {"jobs": args.jobs, "delay_ms": args.delay_ms, "embedder": args.embedder,
                   "turns_per_job": 2, "storage": args.storage},
        "machine": machine_info(),
        "results": results,
    }
    write_json(args.out, report)
    plot(results, args.out.with_suffix(".png"), args.delay_ms)
    write_markdown(report, args.out.with_suffix(".md"))
    print(args.out.with_suffix(".md").read_text())
    return 0
