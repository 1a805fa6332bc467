"""The re-shard benchmark's report: ``reshard.json``, ``.md`` and ``.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import machine_info, md_table, plot_style, write_json


def report(runs: list[dict[str, Any]], headline: dict[str, float], config: dict[str, Any], out: Path) -> None:
    rows = [[f"{r['from']} → {r['to']}", r["entries"], r["turns"], r["users"], f"{r['seconds']:.2f}",
             f"{r['cpu_s']:.1f}", f"{r['entries'] / r['seconds']:.0f}", f"{r['s_per_100k_entries']:.1f}",
             " / ".join(f"{x:.1f}" for x in r["load_average_before"])] for r in runs]
    machine = machine_info()
    lines = ["# Re-shard time (`memctl reshard`, embedded stores)", "",
             f"{config['entries']} entries ({config['dim']}-dim vectors, every tenth a tombstone), one archived turn "
             f"per entry, {config['users']} users, each with a finished job and a write counter. Each run moves "
             "everything to the new count's shards and rebuilds their keyword indexes; seconds per 100k entries "
             "is each run's time scaled linearly from its size (the work is per user and per entry).", "",
             f"**{headline['mean']:.1f} s per 100k entries** (mean of {len(runs)} runs; range "
             f"{headline['min']:.1f}–{headline['max']:.1f}, stdev {headline['stdev']:.1f}).", "",
             f"Machine: {machine['cpu']}, {machine['cpu_count']} cores, shared with other work (load average before "
             "each run in the table); the process's CPU time shows how much of a run is waiting on the disk "
             "(each group's flush of the Qdrant Edge stores and the SQLite commits are fsynced).", "",
             *md_table(["run", "entries", "turns", "users", "s", "CPU s", "entries/s", "s per 100k entries",
                        "load 1/5/15 min"], rows), ""]
    write_json(out.with_suffix(".json"), {"runs": runs, "s_per_100k_entries": headline, "config": config,
                                          "machine": machine})
    out.with_suffix(".md").write_text("\n".join(lines))
    plt = plot_style()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    names = [f"{r['from']}→{r['to']}" for r in runs]
    ax.bar(names, [r["s_per_100k_entries"] for r in runs])
    ax.axhline(headline["mean"], linestyle="--", label=f"mean {headline['mean']:.1f} s")
    ax.set_ylabel("s per 100k entries")
    ax.set_title(f"memctl reshard ({config['entries']} entries per run)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"))
