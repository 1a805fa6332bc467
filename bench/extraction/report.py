"""The extraction benchmark's plot and markdown report (``extraction.png``, ``extraction.md``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import md_table, plot_style
from bench.harness.timing import fmt_ms


def plot(results: dict[str, Any], path: Path, delay_ms: float) -> None:
    plt = plot_style()
    names = list(results)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    parts = [("model_ms", "model (HTTP + fixed delay)"), ("writes_ms", "store writes"),
             ("searches_ms", "existing/reconcile searches"), ("machinery_ms", "job machinery")]
    bottom = [0.0] * len(names)
    for i, (field, label) in enumerate(parts):
        vals = [max(0.0, results[n][field]["p50"]) for n in names]
        ax1.bar(range(len(names)), vals, 0.6, bottom=bottom, label=label, color=f"C{i}")
        bottom = [b + v for b, v in zip(bottom, vals, strict=True)]
    ax1.set_xticks(range(len(names)), names, fontsize=8)
    ax1.set_ylabel("ms per job (p50 of each part)")
    ax1.set_title(f"Where a job's time goes (2 turns per job, model delay {delay_ms:g} ms)")
    ax1.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2)
    for j, q in enumerate(("p50", "p90", "p99")):
        ax2.bar([i + (j - 1) * 0.25 for i in range(len(names))],
                [results[n]["ingest_to_searchable_ms"][q] for n in names], 0.25, label=q, color=f"C{j + 4}")
    ax2.set_xticks(range(len(names)), names, fontsize=8)
    ax2.set_ylabel("ms")
    ax2.set_title("Ingest call → searchable")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_markdown(report: dict[str, Any], path: Path) -> None:
    cfg, res, m = report["config"], report["results"], report["machine"]
    rows = []
    for name, s in res.items():
        s = {k: v for k, v in s.items() if isinstance(v, dict)}
        rows.append([name, fmt_ms(s["model_ms"]["p50"]), fmt_ms(s["job_ms"]["p50"]),
                     fmt_ms(s["overhead_per_turn_ms"]["p50"]), fmt_ms(s["overhead_per_turn_ms"]["p90"]),
                     fmt_ms(s["writes_ms"]["p50"]), fmt_ms(s["searches_ms"]["p50"]), fmt_ms(s["machinery_ms"]["p50"]),
                     fmt_ms(s["ingest_to_searchable_ms"]["p50"]), fmt_ms(s["ingest_to_searchable_ms"]["p99"])])
    lines = [
        "# Extraction jobs: overhead and ingest-to-searchable latency",
        "",
        f"`python -m bench.extraction` — {cfg['jobs']} jobs per scenario, one at a time, 2 turns per job, "
        f"embedder `{cfg['embedder']}`, scripted model delay {cfg['delay_ms']:g} ms. "
        f"Machine: {m['cpu']} ({m['cpu_count']} CPUs, load average {m['load_average'][0]} at the start: "
        f"other work was running), Python {m['python']}. Times in ms.",
        "",
        *md_table(["scenario", "model p50", "job p50", "overhead/turn p50", "overhead/turn p90",
                   "writes p50", "searches p50", "machinery p50", "ingest→searchable p50",
                   "ingest→searchable p99"], rows),
        "",
        "- *overhead* = job wall time (ingest call start → job finished) − model time; per turn = / 2. "
        "*model* is the extractor call: the fixed delay plus HTTP through the `openai` client.",
        "- *writes* / *searches*: time inside MemoryService writes (embedding + Qdrant Edge + Tantivy commit) "
        "and searches (existing memories, reconcile candidates); *machinery* = overhead − writes − searches: "
        "validation, SQLite archive/job/cursor transactions (fsync'd), queue hand-off, worker, deadline thread.",
        "- `disk` is the machine's virtual disk, `tmpfs` is /dev/shm: the difference is the cost of the stores' "
        "and SQLite's fsyncs.",
        "- *ingest→searchable* ends when a hybrid search with the user turn (query embedding included) returns "
        "the new entry. "
        "Jobs whose memory reconcile judged a duplicate (nothing new to find): "
        + ", ".join(f"{n} {s.get('jobs_without_new_entry', 0)}" for n, s in res.items()) + ".",
        "- The job machinery itself (archive, job rows, cursor, queue, worker, deadline thread) is a few ms per "
        "job; a job's cost is the store writes and the searches. The verbatim extractor ignores existing "
        "memories (it declares ``uses_existing`` False), so the pipeline runs no existing-memory search for it.",
        "",
        "![extraction](extraction.png)",
        "",
    ]
    path.write_text("\n".join(lines))
