"""The table and plot of :mod:`bench.relevance` (results JSON in, markdown and PNG out).

    python -m bench.relevance.report RUN.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from bench.harness.report import md_table, plot_style

LABELS = {"relevance": "relevance (cosine, less the penalty for missing names)", "cosine": "cosine alone",
          "fused_score": "fused RRF score (`score`)", "keyword": "keyword evidence (query content words in the hit)"}


GATES = {
    "gate": "For comparison, a floor on the search instead of each hit (a search whose best returned hit is below "
            "it returns nothing, else its hits unchanged; derived from the same searches):",
    "gate_cosine": "The same floor on the search, judged by the cosine alone (what a query that names nobody gets):",
}
"""The search-level floors of a run, each with the sentence that introduces its table."""


def _ci(v: list[float]) -> str:
    return f"[{v[0]:.3f}, {v[1]:.3f}]"


def markdown(res: dict[str, Any]) -> str:
    m, floor = res["machine"], res["default_floor"]
    lines = [
        "# Relevance benchmark", "",
        f"`python -m bench.relevance {res['argv']}` on {m['cpu']} ({m['cpu_count']} CPUs shared with other jobs; "
        f"load average {m['load_average']} at start, {res['load_average_end']} at end): {res['conversations']} "
        f"LoCoMo conversations ({res['entries']:,} entries, engine default: windows +-1, `minilm-l3`), "
        f"{res['questions']:,} questions (categories 1-4). Own: the question searched in its own conversation; "
        "cross: in the next conversation's user. 95 % bootstrap intervals.", "",
        "Separation of own vs cross top hits (AUC):", "",
    ]
    rows = [[LABELS[s], f"**{v['auc']:.3f}**" if s == "relevance" else f"{v['auc']:.3f}", _ci(v["ci95"]),
             f"{v['own_median']:.3f}", f"{v['cross_median']:.3f}"] for s, v in res["separation"].items()]
    lines += md_table(["signal of the top hit", "AUC", "95 % CI", "own median", "cross median"], rows)
    lines += ["", f"Floors (`similarity_threshold`; default floor {floor:g}; own any@5 without a floor "
                  f"{res['any@5_no_floor']:.3f} {_ci(res['any@5_no_floor_ci95'])}):", ""]
    rows = []
    for k, v in res["floors"].items():
        name = f"**{k}** (default)" if float(k) == floor else k
        rows.append([name, f"{v['cross_emptied']:.3f} {_ci(v['cross_emptied_ci95'])}", f"{v['own_emptied']:.3f}",
                     f"{v['any@5']:.3f} {_ci(v['any@5_ci95'])}", f"{v['any@5_drop']:+.4f} {_ci(v['any@5_drop_ci95'])}"])
    lines += md_table(["floor", "cross searches emptied", "own searches emptied", "own any@5", "any@5 drop"], rows)
    for name, intro in GATES.items():
        if res.get(name):
            rows = [[k, f"{v['cross_emptied']:.3f} {_ci(v['cross_emptied_ci95'])}", f"{v['any@5']:.3f}",
                     f"{v['any@5_drop']:+.4f}"] for k, v in res[name].items()]
            lines += ["", intro, "", *md_table(["floor", "cross searches emptied", "own any@5", "any@5 drop"], rows)]
    if res.get("halves"):
        lines += ["", f"The default floor ({floor:g}, on each hit) on each half of the conversations apart: "
                  + "; ".join(f"{h} half ({v['questions']} questions) {v['cross_emptied']:.3f} emptied, "
                              f"any@5 drop {v['any@5_drop']:+.4f}" for h, v in res["halves"].items()) + "."]
    t = res["targets"]
    lines += ["", f"Targets: AUC >= {t['auc']} ({'met' if res['met']['auc'] else 'NOT met'}), cross emptied "
                  f">= {t['cross_emptied']:.0%} ({'met' if res['met']['cross_emptied'] else 'NOT met'}), any@5 drop "
                  f"<= {t['recall_drop']} ({'met' if res['met']['recall_drop'] else 'NOT met'}). "
                  f"Run time {res['seconds']['total']:.0f} s.", ""]
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    plt = plot_style()
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    bins = [i / 50 - 0.2 for i in range(61)]
    a.hist(res["own_top_relevance"], bins=bins, alpha=0.6, label="own user (answer present)")
    a.hist(res["cross_top_relevance"], bins=bins, alpha=0.6, label="another user")
    a.axvline(res["default_floor"], color="k", ls="--", lw=1, label=f"default floor {res['default_floor']:g}")
    a.set_xlabel("top hit relevance")
    a.set_ylabel("questions")
    a.set_title(f"AUC {res['separation']['relevance']['auc']:.3f} "
                f"(fused score: {res['separation']['fused_score']['auc']:.3f})")
    a.legend()
    floors = [float(k) for k in res["floors"]]
    b.plot(floors, [v["cross_emptied"] for v in res["floors"].values()], "o-", label="cross searches emptied")
    b.plot(floors, [v["any@5"] for v in res["floors"].values()], "s-", label="own session any@5")
    b.axhline(res["any@5_no_floor"], color="gray", ls=":", lw=1, label="own any@5, no floor")
    b.axvline(res["default_floor"], color="k", ls="--", lw=1)
    b.set_xlabel("floor (similarity_threshold)")
    b.set_ylim(0, 1.02)
    b.legend(loc="lower left")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_reports(res: dict[str, Any], out: Path) -> tuple[Path, Path]:
    """``out``'s markdown and PNG beside it (same stem)."""
    md, png = out.with_suffix(".md"), out.with_suffix(".png")
    md.write_text(markdown(res))
    plot(res, png)
    return md, png


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(__doc__)
        return 2
    path = Path(args[0])
    md, png = write_reports(json.loads(path.read_text()), path)
    print(f"wrote {md}, {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
