"""The HTTP benchmark's verdicts against the targets, its markdown report and its plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.report import md_table, plot_style

INGRESS_LABEL = {"proxy": "Serve proxy", "haproxy": "HAProxy"}


def report(res: dict[str, Any]) -> str:
    lines = [f"HTTP API vs in-process, {res['config']['entries']:,} entries, {res['config']['shards']} shards, "
             f"embedder {res['config']['embedder']} (load average at start {res['machine'].get('load_average')})", ""]
    rows = [["in-process", "", "1", _fmt(res["in_process"]["search"]), "", _fmt(res["in_process"]["add"]), ""]]
    for mode, http in res["http"].items():
        for c, srch in http["search"].items():
            a = http["add"][c]
            rows.append(["HTTP", INGRESS_LABEL.get(mode, mode), c, _fmt(srch), f"{srch['throughput_rps']}", _fmt(a),
                         f"{a['throughput_rps']}"])
    lines += md_table(["path", "ingress", "concurrency", "search p50/p99 ms", "search req/s", "add p50/p99 ms",
                       "add req/s"], rows)
    lines += ["", *(f"- {t}" for t in res["targets"])]
    parts = {mode: http["breakdown"] for mode, http in res["http"].items() if http.get("breakdown")}
    if parts:
        lines += ["", "Where a search's time goes (one request at a time, ms p50 / p99):", ""]
        modes = list(parts)
        lines += md_table(["part", *(INGRESS_LABEL.get(m, m) for m in modes)], [
            ["HTTP floor: GET /healthz through the ingress (no work)",
             *(_fmt(parts[m]["http_floor_healthz"]) for m in modes)],
            ["query embedding (in process)", *(_fmt(parts[m]["embed_query"]) for m in modes)],
            ["shard actor search from the driver, vector given (one Ray hop + engine)",
             *(_fmt(parts[m]["actor_search_vector_given"]) for m in modes)],
            ["HTTP search, c=1 (all of it)", *(_fmt(res["http"][m]["search"]["1"]) for m in modes)],
        ])
    return "\n".join(lines) + "\n"


def _fmt(p: dict[str, float]) -> str:
    return f"{p['p50']:.1f} / {p['p99']:.1f}"


def targets(res: dict[str, Any]) -> list[str]:
    inproc = res["in_process"]["search"]
    out = []
    for mode, http in res["http"].items():
        s1 = http["search"]["1"]
        over = s1["p50"] - inproc["p50"]
        label = INGRESS_LABEL.get(mode, mode)
        out += [
            f"{label}: HTTP search p50 <= 10 ms at concurrency 1: {s1['p50']:.1f} ms -> "
            f"{'PASS' if s1['p50'] <= 10 else 'FAIL'}",
            f"{label}: HTTP search p99 <= 40 ms at concurrency 1: {s1['p99']:.1f} ms -> "
            f"{'PASS' if s1['p99'] <= 40 else 'FAIL'}",
            f"{label}: HTTP overhead <= 3 ms over in-process at p50: {over:.1f} ms -> "
            f"{'PASS' if over <= 3 else 'FAIL'}",
            f"{label}: errors: {sum(v['errors'] for op in ('search', 'add') for v in http[op].values())}",
        ]
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, op in zip(axes, ("search", "add"), strict=True):
        labels = ["in-process"]
        p50 = [res["in_process"][op]["p50"]]
        p99 = [res["in_process"][op]["p99"]]
        for mode, http in res["http"].items():
            for c in http[op]:
                labels.append(f"{INGRESS_LABEL.get(mode, mode)}\nc={c}")
                p50.append(http[op][c]["p50"])
                p99.append(http[op][c]["p99"])
        x = np.arange(len(labels))
        ax.bar(x - 0.2, p50, 0.4, label="p50")
        ax.bar(x + 0.2, p99, 0.4, label="p99")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_yscale("log")
        ax.set_ylabel("ms (log)")
        ax.set_title(f"{op} latency ({res['config']['entries']:,} entries)")
        if op == "search":
            ax.axhline(10, color="#d62728", ls="--", lw=1, label="target p50 10 ms")
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
