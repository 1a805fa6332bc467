"""The instrumentation benchmark's markdown report (also re-renders a saved JSON)."""

from __future__ import annotations

from typing import Any

from bench.harness.report import md_table

LIMIT_PCT = 5.0
"""The most search p50 may grow with metrics on, percent."""


def render(res: dict[str, Any]) -> str:
    """The markdown report of a result (also re-renders a saved JSON)."""
    cfg, arms, delta = res["config"], res["search_c1"], res["p50_delta_pct"]
    ci = res.get("p50_delta_ci95_pct")
    interval = f", 95 % bootstrap interval [{ci[0]:+.2f}, {ci[1]:+.2f}] %" if ci else ""
    rows = [[arm, f"{a['p50']:.2f}", f"{a['p90']:.2f}", f"{a['p99']:.2f}", str(a["n"])] for arm, a in arms.items()]
    per_round = [[str(r["round"]), r["metrics"], f"{r['p50']:.2f}"] for r in res.get("rounds", [])]
    text = (f"# Cost of instrumentation (search over HTTP, concurrency 1)\n\n{cfg['entries']:,} entries, "
            f"{cfg['users']} users, {cfg['shards']} shards, {cfg['embedder']}; {cfg['rounds']} alternating rounds "
            f"per arm (a fresh Ray cluster each), {cfg['queries']} searches each; load average "
            f"{res['machine'].get('load_average', '?')}.\n\n"
            + "\n".join(md_table(["metrics", "p50 ms", "p90 ms", "p99 ms", "n"], rows))
            + f"\n\np50 with metrics on vs off: {delta:+.2f} %{interval} (cost limit {LIMIT_PCT:g} %: "
            f"{'met' if delta <= LIMIT_PCT else 'NOT met'}).\n")
    if per_round:
        spread = [r["p50"] for r in res["rounds"]]
        text += ("\nPer round (the spread between rounds of one arm is this machine's noise: "
                 f"{min(spread):.2f}–{max(spread):.2f} ms):\n\n"
                 + "\n".join(md_table(["round", "metrics", "p50 ms"], per_round)) + "\n")
    return text
