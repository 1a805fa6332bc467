"""The side-by-side report of :mod:`bench.peers.run`: a markdown table and one plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import md_table, plot_style

SHOWN = (("session_recall_any@5", "any@5"), ("session_recall_all@5", "all@5"), ("turn_recall_all@10", "turn_all@10"),
         ("ndcg@10", "ndcg@10"))


def _with_ci(side: dict[str, Any], key: str) -> str:
    lo, hi = side.get("ci95", {}).get(key, [None, None])
    value = side["overall"][key]
    return f"{value:.3f} [{lo:.3f}, {hi:.3f}]" if lo is not None else f"{value:.3f}"


def markdown(res: dict[str, Any]) -> list[str]:
    rows = []
    for name, side in res["sides"].items():
        ms = side["search_ms"]
        rows.append([name, *(_with_ci(side, k) for k, _ in SHOWN), f"{side['overall']['tokens@10']:,.0f}",
                     f"{ms['p50']:.1f} / {ms['p99']:.1f}", f"{side['ingest']['seconds']:,.0f}",
                     side["config"].get("api", "")])
    scored = next(iter(res["sides"].values()))["overall"]["n"] if res["sides"] else 0
    out = [f"LoCoMo, {res['conversations']} conversations, {res['questions']} questions with evidence "
           f"({scored} of categories 1-4 scored), top 10; one run, load average "
           f"{res['machine']['load_average']} at the start, {res['load_average_end']} at the end.", ""]
    out += md_table(["system", *(label for _, label in SHOWN), "tokens@10", "search p50 / p99 ms", "ingest s",
                     "path"], rows)
    out.append("")
    for name, side in res["sides"].items():
        out += [f"- {name}: " + "; ".join(f"{k} {v}" for k, v in side["config"].items())
                + f"; ingest: {side['ingest']['path']}, {side['ingest']['entries']:,} entries"]
    for name, why in res.get("not_run", {}).items():
        out += [f"- not run: {name}: {why}"]
    return out


def plot(res: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    names = list(res["sides"])
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    width = 0.8 / max(1, len(names))
    for j, name in enumerate(names):
        side = res["sides"][name]
        values = [side["overall"][k] for k, _ in SHOWN]
        errs = [[v - side["ci95"][k][0] for (k, _), v in zip(SHOWN, values, strict=True)],
                [side["ci95"][k][1] - v for (k, _), v in zip(SHOWN, values, strict=True)]]
        ax1.bar([i + (j - (len(names) - 1) / 2) * width for i in range(len(SHOWN))], values, width, yerr=errs,
                label=name, capsize=2)
    ax1.set_xticks(range(len(SHOWN)), [label for _, label in SHOWN])
    ax1.set_ylim(0, 1)
    ax1.set_title("LoCoMo recall (95 % intervals)")
    if names:  # none when every side was left out (not_run)
        ax1.legend()
    for j, q in enumerate(("p50", "p99")):
        ax2.bar([i + (j - 0.5) * 0.35 for i in range(len(names))], [res["sides"][n]["search_ms"][q] for n in names],
                0.35, label=q)
    ax2.set_xticks(range(len(names)), names)
    ax2.set_ylabel("ms")
    ax2.set_title("search latency")
    ax2.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
