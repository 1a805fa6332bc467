"""The backfill benchmark's report: ``backfill.json``, ``.md`` and ``.png`` (also re-rendered from a saved JSON)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from bench.harness.report import machine_info, md_table, plot_style, write_json

GOAL = 0.8
"""The pipeline's efficiency goal: job turns/s over the embedder's own encode rate."""


def report(results: list[dict[str, Any]], config: dict[str, Any], out: Path,
           machine: dict[str, Any] | None = None) -> None:
    write_json(out.with_suffix(".json"), {"results": results, "config": config, "machine": machine or machine_info()})
    rows = [[r["archive"], r["sessions"], r["turns"], f"{r['job_wall_s']:.1f}", f"{r['job_turns_per_s']:.1f}",
             f"{r['encode']['passages_per_s']:.1f} ({r['encode']['before']:.0f} / {r['encode']['after']:.0f})",
             f"{r['efficiency']:.2f} ({_conservative(r):.2f})", _phases(r["phases_s"], r["job_wall_s"]),
             f"{r['peak_pss_mb']:.0f}",
             f"{r['peak_workers_pss_mb']:.0f}"] for r in results]
    lines = ["# Backfill job throughput", "",
             f"Embedder `{config['embedder']}`, {config['shards']} shards, {config['concurrency']} embedding "
             f"actor(s), Ray with {config['num_cpus']} CPUs on a {os.cpu_count()}-core machine. "
             f"Efficiency = job turns/s ÷ the embedder's own encode rate on the same texts, in this process, "
             f"measured before and after the job (mean; the machine is shared, so both are shown) "
             f"— goal ≥ {GOAL}; in brackets against the faster of the two measurements (a lower bound). "
             "Phases: seconds from the job's start to its first and last embedding batch and to its last "
             "write (before the first embedding: reading, validation, extraction, the group-by-user "
             "shuffle and the embedding actor's start; writes overlap embedding). "
             "Memory: peak PSS of the driver plus every process of its Ray cluster (shards, embedding actor, "
             "Data workers, raylet, GCS), and of the `ray::` workers alone.", "",
             *md_table(["archive", "sessions", "turns", "job s", "job turns/s",
                        "embedder passages/s (before / after)", "efficiency (lower bound)",
                        "phases s (embed first–last, writes end)",
                        "peak PSS MB (all)", "peak PSS MB (Ray workers)"], rows), ""]
    out.with_suffix(".md").write_text("\n".join(lines))
    plt = plot_style()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 4))
    names = [r["archive"] for r in results]
    x = range(len(names))
    ax1.bar([i - 0.2 for i in x], [r["job_turns_per_s"] for r in results], 0.4, label="backfill job (turns/s)")
    ax1.bar([i + 0.2 for i in x], [r["encode"]["passages_per_s"] for r in results], 0.4,
            label="embedder alone (passages/s)")
    for i, r in enumerate(results):
        ax1.text(i, max(r["job_turns_per_s"], r["encode"]["passages_per_s"]) * 1.02, f"{r['efficiency']:.2f}×",
                 ha="center")
    ax1.set_xticks(list(x), names)
    ax1.set_title("throughput (label: efficiency)")
    ax1.legend(loc="lower right")
    ax2.bar(names, [r["peak_pss_mb"] for r in results], label="driver + Ray cluster")
    ax2.bar(names, [r["peak_workers_pss_mb"] for r in results], label="Ray workers (ray::*)")
    ax2.set_title("peak memory, PSS (MB)")
    ax2.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"))


def _conservative(r: dict[str, Any]) -> float:
    return float(r["job_turns_per_s"]) / max(float(r["encode"]["before"]), float(r["encode"]["after"]))


def _phases(phases: dict[str, float], wall: float) -> str:
    if "embedding_first_s" not in phases:
        return "-"
    return f"{phases['embedding_first_s']:.0f}–{phases['embedding_last_s']:.0f}, {wall:.0f}"
