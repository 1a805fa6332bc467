"""Reports of the LoCoMo retrieval benchmark: ``retrieval.json``, ``retrieval.md`` and ``retrieval.png``."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.locomo import CATEGORIES
from bench.harness.report import md_table, plot_style, write_json
from bench.harness.timing import fmt_ms

GOAL = {"session_recall_any@5": 0.95, "turn_recall_all@10": 0.85}
#: Measured on this machine, same file, same scoring, all-MiniLM-L6-v2 (ARCHITECTURE.md), categories 1-4:
#: (session_recall_any@5, turn_recall_all@10, tokens@10, search p50 ms).
PEERS: dict[str, tuple[float, float, float, float]] = {
    "MemPalace 3.11, drawer per session": (0.854, 0.727, 1376, 77.5),
    "MemPalace, drawer per turn": (0.800, 0.468, 227, 80.5),
    "Mem0 OSS 2.2.1 (infer=False)": (0.727, 0.406, 205, 77.7),
    "plain BM25 per turn": (0.831, 0.475, 239, 0.7),
    "dense + BM25 RRF per turn": (0.820, 0.498, 220, 12.2),
}
OVERALL_COLS = (
    ("any@1", "session_recall_any@1"), ("any@5", "session_recall_any@5"), ("any@10", "session_recall_any@10"),
    ("all@5", "session_recall_all@5"), ("turn_all@1", "turn_recall_all@1"), ("turn_all@5", "turn_recall_all@5"),
    ("turn_all@10", "turn_recall_all@10"), ("ndcg@10", "ndcg@10"),
)


def _f(v: Any) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def goal_met(overall: dict[str, float]) -> bool:
    return all(overall[k] >= v for k, v in GOAL.items())


def overall_rows(results: dict[str, dict[str, Any]], names: Sequence[str]) -> list[list[str]]:
    rows = []
    for name in names:
        r = results[name]
        o = r["overall"]
        rows.append([f"`{name}`", *(_f(o[k]) for _, k in OVERALL_COLS), f"{o['tokens@10']:.0f}",
                     fmt_ms(r["latency_ms"]["p50"]), fmt_ms(r["latency_ms"]["p99"]), r["config"].get("note", "")])
    return rows


def category_rows(res: dict[str, Any]) -> list[list[str]]:
    rows = []
    for cat, m in [("1-4", res["overall"]), *sorted(res["by_category"].items())]:
        if not m.get("n"):
            continue
        label = "overall 1-4" if cat == "1-4" else f"{cat} {CATEGORIES.get(int(cat), '')}"
        rows.append([label, str(m["n"]), *(_f(m[k]) for _, k in OVERALL_COLS), f"{m['tokens@10']:.0f}"])
    return rows


def _goal_line(name: str, o: dict[str, float], label: str) -> str:
    parts = [f"{k.replace('session_recall_', 'session ').replace('turn_recall_', 'turn ')} {o[k]:.3f} "
             f"({'>=' if o[k] >= v else '<'} {v})" for k, v in GOAL.items()]
    return (f"- `{name}` ({label}): {', '.join(parts)}, tokens@10 {o['tokens@10']:.0f}: "
            f"goal {'met' if goal_met(o) else 'not met'}")


def idea_rows(report: dict[str, Any]) -> list[list[str]]:
    results = report["configs"]
    rows = []
    for item in report.get("ideas", []):
        a, b = results[item["with"]]["overall"], results[item["without"]]["overall"]
        d = {k: a[k] - b[k] for k in ("session_recall_any@5", "session_recall_all@5", "turn_recall_all@10", "ndcg@10")}
        dt = results[item["with"]]["latency_ms"]["p50"] - results[item["without"]]["latency_ms"]["p50"]
        rows.append([item["idea"], f"`{item['with']}` vs `{item['without']}`",
                     *(f"{v:+.3f}" for v in d.values()), f"{a['tokens@10'] - b['tokens@10']:+.0f}", f"{dt:+.1f}"])
    return rows


def markdown(report: dict[str, Any], names: Sequence[str]) -> str:
    results = report["configs"]
    best, default, best_any = report["best"], report["default"], report.get("best_unbudgeted", report["best"])
    m = report["machine"]
    lines = [
        "# LoCoMo retrieval benchmark",
        "",
        f"`python -m bench.retrieval` on `{Path(report['data']['file']).name}` "
        f"({report['data']['conversations']} conversations, {report['data'].get('questions', '?')} questions; "
        f"{m['cpu']}, {m['cpu_count']} cores, load average {m['load_average']} at the end, shared machine). "
        "One search per question (question text only), top 10; recall through entry provenance "
        "(scoring as in ARCHITECTURE.md, `bench/retrieval/recall.py`); categories 1-4 overall, category 5 "
        "(adversarial) apart. Latency = the embedder's per-query time + search and result shaping "
        "(in-process, one query at a time), added percentile by percentile; the machine was shared, so "
        "absolute times are noisy.",
        "",
        "## All configurations (categories 1-4)",
        "",
        *md_table(["config", *(h for h, _ in OVERALL_COLS), "tokens@10", "p50 ms", "p99 ms", "what"],
                  overall_rows(results, names)),
        "",
        f"## Goal (session any@5 >= {GOAL['session_recall_any@5']}, turn all@10 >= {GOAL['turn_recall_all@10']})",
        "",
        _goal_line(default, results[default]["overall"], "default"),
        _goal_line(best, results[best]["overall"], f"best within {report.get('budget_tokens', 0):.0f} tokens@10"),
    ]
    if best_any != best:
        lines.append(_goal_line(best_any, results[best_any]["overall"], "best at any context cost"))
    lines += [
        "",
        "Peers (same file and scoring, all-MiniLM-L6-v2, from ARCHITECTURE.md):",
        "",
        *md_table(["system", "any@5", "turn_all@10", "tokens@10", "search p50 ms"],
                  [[k, *(f"{x:g}" for x in v)] for k, v in PEERS.items()]),
        "",
    ]
    ideas = idea_rows(report)
    if ideas:
        lines += ["## What each idea did (differences, categories 1-4)", "",
                  *md_table(["idea", "compared", "any@5", "all@5", "turn_all@10", "ndcg@10", "tokens@10", "p50 ms"],
                            ideas), ""]
    shown = list(dict.fromkeys([default, best, best_any]))
    for name in shown:
        title = "Default" if name == default else ("Best within budget" if name == best else "Best at any cost")
        lines += [f"## {title}: `{name}` by category", "",
                  *md_table(["category", "n", *(h for h, _ in OVERALL_COLS), "tokens@10"],
                            category_rows(results[name])), ""]
    adv = [[f"`{n}`", str(results[n]["adversarial"].get("n", 0)),
            *(_f(results[n]["adversarial"].get(k, 0.0)) for _, k in OVERALL_COLS)]
           for n in names if results[n]["adversarial"].get("n")]
    if adv:
        lines += ["## Category 5 (adversarial), all configurations", "",
                  *md_table(["config", "n", *(h for h, _ in OVERALL_COLS)], adv), ""]
    return "\n".join(lines)


def plot(report: dict[str, Any], names: Sequence[str], path: Path) -> None:
    plt = plot_style()
    from matplotlib.ticker import NullFormatter

    results = report["configs"]
    fig, axes = plt.subplots(1, 3, figsize=(16, 5.2))
    for ax, metric, label in ((axes[0], "session_recall_any@5", "session any@5"),
                              (axes[1], "turn_recall_all@10", "turn all@10")):
        first = [report["default"], report["best"], report.get("best_unbudgeted", report["best"])]
        labelled: list[tuple[float, float]] = []
        for i, name in enumerate(names):
            o = results[name]["overall"]
            ax.scatter(o["tokens@10"], o[metric], color=f"C{i % 10}", marker="o", s=30)
        for name in list(dict.fromkeys([*first, *names])):  # labels that would overlap are left out
            x, y = results[name]["overall"]["tokens@10"], results[name]["overall"][metric]
            if any(abs(math.log(x / lx)) < 0.35 and abs(y - ly) < 0.012 for lx, ly in labelled):
                continue
            labelled.append((x, y))
            ax.annotate(name, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points",
                        fontweight="bold" if name in first else "normal")
        for peer, vals in PEERS.items():
            y = vals[0] if metric == "session_recall_any@5" else vals[1]
            ax.scatter(vals[2], y, color="#7f7f7f", marker="x", s=30)
            ax.annotate(peer, (vals[2], y), fontsize=6, color="#7f7f7f", xytext=(3, -8), textcoords="offset points")
        ax.axhline(GOAL[metric], color="#d62728", ls="--", lw=1, label=f"goal {GOAL[metric]}")
        ax.set_xscale("log")
        ticks = [200, 500, 1000, 2000, 5000]
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("tokens@10 (log)")
        ax.set_ylabel(label)
        ax.set_title(f"{label} vs context cost (categories 1-4)")
        ax.legend(loc="lower right")
    ax = axes[2]
    shown = list(dict.fromkeys([report["default"], report["best"], report.get("best_unbudgeted", report["best"])]))
    cats = ["1", "2", "3", "4"]
    width = 0.8 / (2 * len(shown))
    for s_i, name in enumerate(shown):
        for m_i, (metric, hatch) in enumerate((("session_recall_any@5", ""), ("turn_recall_all@10", "//"))):
            j = s_i * 2 + m_i
            xs = [c + (j - (2 * len(shown) - 1) / 2) * width for c in range(len(cats))]
            ys = [results[name]["by_category"].get(c, {}).get(metric, 0.0) for c in cats]
            ax.bar(xs, ys, width * 0.9, color=f"C{s_i}", hatch=hatch, alpha=0.85,
                   label=f"{name} {'any@5' if m_i == 0 else 'turn_all@10'}")
    ax.set_xticks(range(len(cats)), [f"{c} {CATEGORIES[int(c)]}" for c in cats])
    ax.set_ylim(0, 1.05)
    ax.set_title("by category")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncol=2, fontsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_reports(report: dict[str, Any], folder: Path, names: Sequence[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / "retrieval.json", report)
    (folder / "retrieval.md").write_text(markdown(report, names) + "\n")
    plot(report, names, folder / "retrieval.png")
