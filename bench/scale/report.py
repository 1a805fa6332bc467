"""Tables and plots of :mod:`bench.scale` (results JSON in, markdown and PNGs out).

    python -m bench.scale.report RUN.json [REPEAT.json ...]
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.harness.report import md_table, plot_style

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


def plots(runs: list[dict[str, Any]], stem: Path) -> list[Path]:
    """``<stem>_latency.png``, ``_throughput.png``, ``_memory.png``, ``_restart.png`` (entries on a log x).

    The first run is drawn as lines; further runs (repeats) as hollow markers of the same colour.
    """
    plt = plot_style()
    out: list[Path] = []

    def line(ax: Any, get: Any, label: str, color: str, ls: str = "-") -> None:
        for i, res in enumerate(runs):
            sizes = [int(n) for n in res["sizes"]]
            ys = [get(res, n, r) for n, r in res["sizes"].items()]
            if i == 0:
                ax.plot(sizes, ys, ls, marker="o", color=color, label=label)
            else:
                ax.plot(sizes, ys, "o", mfc="none", color=color, label=f"{label} (repeat)" if i == 1 and
                        ls == "-" else None)

    def finish(fig: Any, axes: Any, name: str) -> None:
        for ax in axes:
            ax.set_xscale("log")
            ax.set_xlabel("entries (all shards)")
            ax.legend(fontsize=6)
        fig.tight_layout()
        path = stem.with_name(f"{stem.name}_{name}.png")
        fig.savefig(path)
        plt.close(fig)
        out.append(path)

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, mode in zip(axes, ("vector_given", "end_to_end"), strict=True):
        for cls, color in (("small", "C0"), ("large", "C3")):
            for p, ls in (("p50", "-"), ("p99", ":")):
                line(ax, lambda _res, _n, r, c=cls, m=mode, q=p: r["search"][c][m][q], f"{cls} user {p}", color, ls)
        ax.set(title=f"search latency ({mode.replace('_', ' ')})", ylabel="ms", yscale="log")
    finish(fig, axes, "latency")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, (key, label) in enumerate((("single_vector_given_qps", "single, vector given"),
                                      ("batched_vector_given_qps", "batched, vector given"),
                                      ("single_end_to_end_qps", "single, e2e"),
                                      ("batched_end_to_end_qps", "batched, e2e"))):
        line(axes[0], lambda _res, _n, r, k=key: r["throughput"][k], label, f"C{i}")
    axes[0].set(title="search throughput", ylabel="queries/s")
    line(axes[1], lambda res, n, _r: res["load"][n]["windows"][-1]["entries_per_s"],
         "backfill (load, last tenth)", "C0")
    for i, key in enumerate(("backfill", "add_many")):
        line(axes[1], lambda _res, _n, r, k=key: r["write"][k]["entries_per_s"], f"{key} (fresh batch)", f"C{i + 1}")
    axes[1].set(title="write throughput into a store of that size", ylabel="entries/s")
    finish(fig, axes, "throughput")

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for i, k in enumerate(STORE_NAMES):
        line(axes[0], lambda _res, _n, r, s=k: r.get("store_rss", {}).get(s, {}).get("bytes_per_entry"), k, f"C{i}")
        line(axes[1], lambda _res, _n, r, s=k: r["disk_bytes_per_entry"][s], k, f"C{i}")
    line(axes[0], lambda _res, _n, r: r["rss_mb_process"] * 2**20 / r["stored_entries"],
         "whole process (incl. the bench's data)", "k", "--")
    axes[0].set(title="resident memory per entry", ylabel="bytes/entry", yscale="log")
    axes[1].set(title="disk per entry", ylabel="bytes/entry", yscale="log")
    finish(fig, axes, "memory")

    fig, axes = plt.subplots(1, 1, figsize=(5.5, 4), squeeze=False)
    ax = axes[0][0]
    line(ax, lambda _res, _n, r: r["restart"]["open"]["seconds_total"], "open (all shards)", "C0")
    line(ax, lambda _res, _n, r: r["restart"]["rebuild_keywords"]["seconds_total"],
         "open, keyword index lost (rebuilt)", "C1")
    ax.set(title="shard restart", ylabel="seconds", yscale="log")
    finish(fig, [ax], "restart")
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.scale.report RUN.json [REPEAT.json ...]``: the first run's markdown again, and the PNGs
    of all the runs (named after the first), from the JSON."""
    import json
    import sys

    paths = [Path(p) for p in (argv if argv is not None else sys.argv[1:])]
    runs = [json.loads(p.read_text()) for p in paths]
    plots(runs, paths[0].with_suffix(""))
    paths[0].with_suffix(".md").write_text(markdown(runs[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
