"""The token-budget curve of the LoCoMo retrieval benchmark: ``budget.json`` and ``budget.png``.

For one configuration (the default): session any / turn all over what a ``max_tokens`` search returns at
each budget of :data:`bench.retrieval.recall.BUDGETS`, beside the @k figures of the top-10 search and its
tokens@10, every figure with its bootstrap 95 % interval (questions resampled, categories 1-4).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import load_average, machine_info, plot_style, write_json
from bench.retrieval.recall import BUDGETS

AT_K = ("session_recall_any@5", "session_recall_all@5", "turn_recall_all@10", "ndcg@10")
CURVE = (("session_recall_any", "session any"), ("turn_recall_all", "turn all"))


def budget_summary(name: str, res: dict[str, Any], load_start: list[float]) -> dict[str, Any]:
    o, ci = res["overall"], res.get("ci95", {})
    return {
        "config": name,
        "questions": o["n"],
        "at_k": {k: {"value": o[k], "ci95": ci.get(k)} for k in AT_K} | {"tokens@10": o["tokens@10"]},
        "budgets": [
            {"max_tokens": b, "tokens_used": round(o[f"tokens@{b}tok"], 1),
             **{m: {"value": o[f"{m}@{b}tok"], "ci95": ci.get(f"{m}@{b}tok")} for m, _ in CURVE}}
            for b in BUDGETS
        ],
        "counter": "whitespace",
        "load_average": {"start": load_start, "end": load_average()},
        "machine": machine_info(),
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    xs = [b["max_tokens"] for b in summary["budgets"]]
    for (metric, label), colour in zip(CURVE, ("tab:blue", "tab:orange"), strict=True):
        ys = [b[metric]["value"] for b in summary["budgets"]]
        lo = [b[metric]["value"] - b[metric]["ci95"][0] for b in summary["budgets"]]
        hi = [b[metric]["ci95"][1] - b[metric]["value"] for b in summary["budgets"]]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=4, color=colour, label=f"{label}, max_tokens")
    at_k = summary["at_k"]
    tok10 = at_k["tokens@10"]
    for key, label, colour in (("session_recall_any@5", "session any@5", "tab:blue"),
                               ("turn_recall_all@10", "turn all@10", "tab:orange")):
        ax.scatter([tok10], [at_k[key]["value"]], marker="*", s=160, color=colour, label=f"{label} (top 10)")
    ax.set_xscale("log")
    ax.minorticks_off()
    ax.set_xticks(xs, [str(x) for x in xs])
    ax.annotate(f"top 10: {tok10:.0f} tokens", (tok10, at_k["turn_recall_all@10"]["value"]),
                textcoords="offset points", xytext=(-95, 8), fontsize=8)
    ax.set_xlabel("tokens of results (whitespace)")
    ax.set_ylabel("recall (LoCoMo, categories 1-4)")
    ax.set_title(f"Recall within a token budget: {summary['config']} (bootstrap 95 % CI)")
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_budget_report(summary: dict[str, Any], folder: Path) -> None:
    write_json(folder / "budget.json", summary)
    plot(summary, folder / "budget.png")
