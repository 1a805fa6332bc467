"""Tables and plots of :mod:`bench.scale` (results JSON in, markdown and PNGs out)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.report import md_table, plot_style

STORE_NAMES = ("vectors", "keywords", "archive")


def _pp(st: dict[str, Any]) -> str:
    return f"{st['p50']:.2f} / {st['p99']:.2f}" if st.get("n") else "-"


def markdown(res: dict[str, Any]) -> str:
    m, c = res["machine"], res["config"]
    sizes = res["sizes"]
    end = res.get("load_average_end")
    lines = [
        "# Scale benchmark", "",
        f"`python -m bench.scale {c['argv']}` on {m['cpu']} ({m['cpu_count']} CPUs shared with other jobs, "
        f"{m['memory_gb']} GB; load average {m['load_average']} at start, {end} at end); {c['shards']} shards "
        f"(ShardCore in one process, no Ray), embedder {res['embedder']['name']}. Latencies in ms, p50 / p99 "
        f"over {c['queries']} LoCoMo questions per user class and mode (hybrid search, default options).", "",
    ]
    rows = []
    for n, r in sizes.items():
        s, t, w, u = r["search"], r["throughput"], r["write"], r["users"]
        rows.append([f"{int(n):,}", f"{u['users']:,}", f"{u['max']:,}",
                     _pp(s["small"]["vector_given"]), _pp(s["small"]["end_to_end"]),
                     _pp(s["large"]["vector_given"]), _pp(s["large"]["end_to_end"]),
                     f"{t['single_vector_given_qps']:.0f} / {t['batched_vector_given_qps']:.0f}",
                     f"{t['single_end_to_end_qps']:.0f} / {t['batched_end_to_end_qps']:.0f}",
                     f"{res['load'][n]['windows'][-1]['entries_per_s']:,.0f}",
                     f"{w['backfill']['entries_per_s']:,.0f}", f"{w['add_many']['entries_per_s']:,.0f}"])
    lines += md_table(["entries", "users", "largest user", "small: given", "small: e2e", "large: given",
                       "large: e2e", "qps given (1 / batched)", "qps e2e (1 / batched)",
                       "backfill entries/s (load, last tenth)", "backfill entries/s (fresh batch)",
                       "add_many entries/s (fresh batch)"], rows)
    lines += ["", "Memory and disk (bytes per stored entry; RSS of each store kind opened alone and warmed, "
              "in a child process) and restart (all shards, seconds):", ""]
    rows = []
    for n, r in sizes.items():
        rss = r.get("store_rss", {})
        d = r["disk_bytes_per_entry"]
        rs = r["restart"]
        per = [f"{rss[k]['bytes_per_entry']:,.0f}" if "bytes_per_entry" in rss.get(k, {}) else "-"
               for k in STORE_NAMES]
        rows.append([f"{int(n):,}", *per,
                     *(f"{d[k]:,.0f}" for k in STORE_NAMES), f"{r['rss_mb_process']:,.0f}",
                     f"{rs['open']['seconds_total']:.2f}", f"{rs['rebuild_keywords']['seconds_total']:.2f}"])
    lines += md_table(["entries", "RSS B/entry: vectors", "keywords", "archive", "disk B/entry: vectors",
                       "keywords", "archive", "process RSS MB", "restart: open s", "open + keyword rebuild s"],
                      rows)
    if len(sizes) >= 2:
        (n0, a), (n1, b) = list(sizes.items())[-2:]
        grow = b["stored_entries"] - a["stored_entries"]
        marg = {k: (b["store_rss"][k]["store_mb"] - a["store_rss"][k]["store_mb"]) * 2**20 / grow
                for k in STORE_NAMES if "store_mb" in b.get("store_rss", {}).get(k, {})
                and "store_mb" in a.get("store_rss", {}).get(k, {})}
        disk = {k: (b["disk_bytes"][k] - a["disk_bytes"][k]) / grow for k in STORE_NAMES}
        lines += ["", f"Marginal cost of an entry from {int(n0):,} to {int(n1):,} entries (bytes): RSS "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in marg.items()) + "; disk "
                  + ", ".join(f"{k} {v:,.0f}" for k, v in disk.items()) + "."]
    return "\n".join(lines) + "\n"


def plots(res: dict[str, Any], stem: Path) -> list[Path]:
    """``<stem>_latency.png``, ``_throughput.png``, ``_memory.png``, ``_restart.png`` (entries on a log x)."""
    plt = plot_style()
    sizes = [int(n) for n in res["sizes"]]
    rs = list(res["sizes"].values())
    out: list[Path] = []

    def finish(fig: Any, axes: Any, name: str) -> None:
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xlabel("entries (all shards)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = stem.with_name(f"{stem.name}_{name}.png")
        fig.savefig(path)
        plt.close(fig)
        out.append(path)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, mode in zip(axes, ("vector_given", "end_to_end"), strict=True):
        for cls, color in (("small", "C0"), ("large", "C3")):
            for p, ls in (("p50", "-"), ("p99", ":")):
                ax.plot(sizes, [r["search"][cls][mode][p] for r in rs], ls, marker="o", color=color,
                        label=f"{cls} user {p}")
        ax.set(title=f"search latency ({mode.replace('_', ' ')})", ylabel="ms", yscale="log")
    finish(fig, axes, "latency")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for key, label in (("single_vector_given_qps", "single, vector given"), ("batched_vector_given_qps",
                       "batched, vector given"), ("single_end_to_end_qps", "single, e2e"),
                       ("batched_end_to_end_qps", "batched, e2e")):
        axes[0].plot(sizes, [r["throughput"][key] for r in rs], marker="o", label=label)
    axes[0].set(title="search throughput", ylabel="queries/s")
    for key in ("backfill", "add_many"):
        axes[1].plot(sizes, [r["write"][key]["entries_per_s"] for r in rs], marker="o", label=f"{key} (fresh batch)")
    axes[1].set(title="write throughput into a store of that size", ylabel="entries/s")
    finish(fig, axes, "throughput")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for k in STORE_NAMES:
        axes[0].plot(sizes, [r.get("store_rss", {}).get(k, {}).get("bytes_per_entry") for r in rs], marker="o",
                     label=k)
        axes[1].plot(sizes, [r["disk_bytes_per_entry"][k] for r in rs], marker="o", label=k)
    axes[0].plot(sizes, [r["rss_mb_process"] * 2**20 / r["stored_entries"] for r in rs], "k--", marker="o",
                 label="whole process (incl. the bench's data)")
    axes[0].set(title="resident memory per entry", ylabel="bytes/entry", yscale="log")
    axes[1].set(title="disk per entry", ylabel="bytes/entry", yscale="log")
    finish(fig, axes, "memory")

    fig, axes = plt.subplots(1, 1, figsize=(5.5, 4), squeeze=False)
    ax = axes[0][0]
    ax.plot(sizes, [r["restart"]["open"]["seconds_total"] for r in rs], marker="o", label="open (all shards)")
    ax.plot(sizes, [r["restart"]["rebuild_keywords"]["seconds_total"] for r in rs], marker="o",
            label="open, keyword index lost (rebuilt)")
    ax.set(title="shard restart", ylabel="seconds", yscale="log")
    finish(fig, [ax], "restart")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.scale_report bench/results/scale.json``: the markdown and PNGs again, from the JSON."""
    import json
    import sys

    path = Path((argv if argv is not None else sys.argv[1:])[0])
    res = json.loads(path.read_text())
    plots(res, path.with_suffix(""))
    path.with_suffix(".md").write_text(markdown(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
