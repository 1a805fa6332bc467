"""The load benchmark's verdict, Markdown report and plot (:mod:`bench.load.run` runs it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import md_table, plot_style

KINDS = ("search", "add", "ingest")
SUSTAINED_FRACTION = 0.95
"""A rate is sustained when it has no error and completes at least this share of what was offered."""


def goals(res: dict[str, Any], flat_pct: float) -> dict[str, Any]:
    sustained = [lv for lv in res["levels"] if lv["sustained"]]
    best = max(sustained, key=lambda lv: lv["offered_rps"]) if sustained else None
    judged = res.get("soak") or best
    mem = (judged or {}).get("memory", {})
    change = mem.get("change_pct")
    flat = change is not None and abs(change) <= flat_pct
    errors = None if judged is None else judged["errors"]
    return {
        "highest_sustained_rps": best["offered_rps"] if best else None,
        "judged_on": None if judged is None else judged["phase"],
        "errors_at_highest": errors,
        "memory_change_pct": change,
        "flat_pct": flat_pct,
        "memory_flat": flat,
        "met": bool(best) and errors == 0 and flat,
    }


def _pp(p: dict[str, Any]) -> str:
    if not p.get("n"):
        return "-"
    return f"{p['p50']:.0f} / {p['p99']:.0f}"


def report(res: dict[str, Any]) -> str:
    cfg, g = res["config"], res["goals"]
    lines = [
        f"Mixed load (70 % search, 20 % add, 10 % ingest), {cfg['entries']:,} entries over {cfg['users']} users, "
        f"{cfg['shards']} shards, embedder {cfg['embedder']}, ingress {cfg.get('ingress', 'proxy')}, "
        f"open loop (Poisson), {cfg['duration_s']:g} s per rate; "
        f"{res['machine']['cpu_count']} CPUs, load average at start {res['machine']['load_average']}.",
        "",
    ]
    rows = []
    for lv in [*res["levels"], *([res["soak"]] if res.get("soak") else [])]:
        lat, mem = lv["latency_ms"], lv["memory"]
        rows.append([
            f"{lv['phase']} {lv['offered_rps']:g}", f"{lv['achieved_rps']:.1f}", lv["errors"],
            _pp(lat["search"]), _pp(lat["add"]), _pp(lat["ingest"]),
            f"{mem.get('first_third_mb', '-')} → {mem.get('last_third_mb', '-')} ({mem.get('change_pct', '-')} %)",
            "yes" if lv["sustained"] else "no",
        ])
    lines += md_table(["offered req/s", "achieved req/s", "errors", "search p50/p99 ms", "add p50/p99 ms",
                       "ingest p50/p99 ms", "RSS MB first → last third", "sustained"], rows)
    lines += [
        "",
        f"- highest sustained rate (0 errors, achieved ≥ {SUSTAINED_FRACTION:.0%} of offered): "
        f"{g['highest_sustained_rps']} req/s",
        f"- errors at that rate ({g['judged_on']}): {g['errors_at_highest']}",
        f"- memory (RSS of the driver and every Ray process) at that rate: {g['memory_change_pct']} % from the "
        f"first to the last third (flat: within ±{g['flat_pct']:g} %) -> {'flat' if g['memory_flat'] else 'NOT flat'}",
        f"- goal (0 errors and flat memory at the highest sustained rate): {'MET' if g['met'] else 'NOT MET'}",
    ]
    for lv in res["levels"]:
        if lv["error_samples"]:
            lines.append(f"- errors at {lv['offered_rps']:g} req/s: {lv['statuses']}; e.g. {lv['error_samples'][0]}")
    return "\n".join(lines) + "\n"


def plot(res: dict[str, Any], samples: list[dict[str, Any]], path: Path) -> None:
    plt = plot_style()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    levels = res["levels"]
    offered = [lv["offered_rps"] for lv in levels]
    ax = axes[0]
    ax.plot(offered, offered, ls="--", color="#7f7f7f", label="offered")
    ax.plot(offered, [lv["achieved_rps"] for lv in levels], marker="o", label="achieved")
    for lv in levels:
        if lv["errors"]:
            ax.annotate(f"{lv['errors']} errors", (lv["offered_rps"], lv["achieved_rps"]), color="#d62728",
                        fontsize=8, textcoords="offset points", xytext=(4, -10))
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(offered, [f"{x:g}" for x in offered])
    ax.set_yticks(offered, [f"{x:g}" for x in offered])
    ax.set_xlabel("offered req/s")
    ax.set_ylabel("achieved req/s")
    ax.set_title("throughput")
    ax.legend()
    ax = axes[1]
    for i, kind in enumerate(KINDS):
        pts = [(lv["offered_rps"], lv["latency_ms"][kind]) for lv in levels if lv["latency_ms"][kind].get("n")]
        ax.plot([x for x, _ in pts], [p["p50"] for _, p in pts], marker="o", color=f"C{i}", label=f"{kind} p50")
        ax.plot([x for x, _ in pts], [p["p99"] for _, p in pts], marker="x", ls=":", color=f"C{i}",
                label=f"{kind} p99")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(offered, [f"{x:g}" for x in offered])
    ax.set_xlabel("offered req/s")
    ax.set_ylabel("ms (from the scheduled send time)")
    ax.set_title("latency")
    ax.legend(ncol=2)
    ax = axes[2]
    if samples:
        t0 = samples[0]["t"]
        ts = [s["t"] - t0 for s in samples]
        ax.plot(ts, [s["rss"] for s in samples], label="RSS, all processes")
        ax.plot(ts, [s["pss"] for s in samples], label="PSS, all processes")
        ax.plot(ts, [s.get("rss_worker", 0) for s in samples], label="RSS, Ray workers")
        top = max(s["rss"] for s in samples)
        for lv in [*levels, *([res["soak"]] if res.get("soak") else [])]:
            a, b = lv["window"]
            ax.axvspan(a, b, alpha=0.12, color="#2ca02c" if lv["sustained"] else "#d62728")
            ax.text(a, top, f"{lv['offered_rps']:g}", fontsize=7, va="bottom")
    ax.set_xlabel("s since the deployment was ready")
    ax.set_ylabel("MB")
    ax.set_title("memory (shaded: rates; green sustained)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
