"""Load benchmark: a mixed open-loop workload against a real Ray Serve deployment, at rising rates.

    RAY_USAGE_STATS_ENABLED=0 unshare -n sh -c 'ip link set lo up && .venv/bin/python -m bench.load'

1. N memory texts (default 20,000; :mod:`bench.harness.served`'s LoCoMo-derived data) over 200 users,
   embedded once with the configured embedder (the settings default unless ``--embedder``; cached under
   bench/results/cache/) and written straight into the shard stores of a fresh data directory;
2. those stores behind Ray Serve (ingress + embedder deployment + shard actors), started in this
   process on 127.0.0.1 (run it inside ``unshare -n``: nothing but loopback);
3. an open-loop workload at each offered rate (default 5, 10, 20, 40, 80, 160 req/s, ``--duration``
   seconds each, Poisson arrival times, seeded): 70 % search, 20 % add, 10 % ingest (a new session of
   four user/assistant events, the verbatim extractor). Requests are sent at their scheduled time
   whatever the earlier ones do, and their latency counts from that time (no coordinated omission);
   at most ``--max-inflight`` are open at once (a request past that is shed and counts as an error);
4. the memory of the whole deployment (RSS, and PSS, of the driver and every Ray process it
   started: GCS, raylet, workers, Serve replicas, shard actors), sampled every second from /proc.

The escalation stops after the first rate that is not sustained (any error, or achieved < 95 % of
offered; achieved = successful completions per second over the span from the first to the last
completion) or at ``--max-requests``. The highest sustained rate then runs again for ``--soak``
seconds; memory is flat when the mean RSS of the soak's last third is within ``--flat-pct`` % of
its first third's. An error is any response but 200/201/202/204, or an exception (timeouts
included). Writes bench/results/load.json, .png and .md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness.cli import parser
from bench.harness.local_ray import start_serve, stop_serve
from bench.harness.locomo import load_locomo
from bench.harness.memory import MemorySampler, memory_trend
from bench.harness.report import RESULTS, load_average, machine_info, write_json
from bench.harness.served import populate, served_data, user_path
from bench.harness.timing import percentiles
from bench.load.report import KINDS, SUSTAINED_FRACTION, goals, plot, report

MIX = (0.70, 0.20, 0.10)
OK_STATUS = frozenset({200, 201, 202, 204})


@dataclass
class Workload:
    """Seeded request factory: (kind, path, JSON body) for the 70/20/10 mix."""

    users: list[int]
    questions: list[str]
    turns: list[str]
    rng: np.random.Generator
    counter: int = 0

    def next(self) -> tuple[str, str, dict[str, Any]]:
        self.counter += 1
        i = self.counter
        kind = KINDS[int(self.rng.choice(len(KINDS), p=MIX))]
        user = self.users[int(self.rng.integers(len(self.users)))]
        if kind == "search":
            q = self.questions[int(self.rng.integers(len(self.questions)))]
            return kind, user_path(user, "/memories/search"), {"query": q}
        if kind == "add":
            t = self.turns[int(self.rng.integers(len(self.turns)))]
            return kind, user_path(user, "/memories"), {"text": f"{t} (load note {i})"}
        start = int(self.rng.integers(len(self.turns) - 4))
        t0 = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=i)
        events = [{"id": f"e{k}", "role": "user" if k % 2 == 0 else "assistant",
                   "content": self.turns[start + k], "timestamp": (t0 + timedelta(seconds=k)).isoformat()}
                  for k in range(4)]
        return kind, user_path(user, f"/sessions/load-{i}/events"), {"events": events}


@dataclass
class Outcome:
    kind: str
    scheduled: float
    done: float
    status: int | None  # None: an exception
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in OK_STATUS


async def run_rate(client: Any, work: Workload, rate: float, duration: float, budget: int, max_inflight: int,
                   rng: np.random.Generator) -> tuple[list[Outcome], float, float]:
    """Send ``rate * duration`` requests (at most ``budget``) at Poisson arrival times in ``duration`` seconds
    (uniform times, sorted: a Poisson process given its count, so every rate offers exactly its rate);
    wait for all of them."""
    loop = asyncio.get_running_loop()
    offsets = np.sort(rng.uniform(0.0, duration, size=min(budget, round(rate * duration))))
    outcomes: list[Outcome] = []
    inflight = 0

    async def one(kind: str, path: str, body: dict[str, Any], scheduled: float) -> None:
        nonlocal inflight
        inflight += 1
        try:
            r = await client.post(path, json=body)
            outcomes.append(Outcome(kind, scheduled, loop.time(), r.status_code,
                                    None if r.status_code in OK_STATUS else r.text[:200]))
        except Exception as exc:  # noqa: BLE001 - every failure is an error of the run
            outcomes.append(Outcome(kind, scheduled, loop.time(), None, f"{type(exc).__name__}: {exc}"[:200]))
        finally:
            inflight -= 1

    tasks: list[asyncio.Task[None]] = []
    t0 = loop.time()
    for off in offsets:
        at = t0 + float(off)
        delay = at - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        kind, path, body = work.next()
        if inflight >= max_inflight:
            outcomes.append(Outcome(kind, at, loop.time(), None, f"shed: {max_inflight} requests in flight"))
            continue
        tasks.append(asyncio.create_task(one(kind, path, body, at)))
    await asyncio.gather(*tasks)
    return outcomes, t0, loop.time()


def summarize(rate: float, duration: float, outcomes: list[Outcome], t0: float, t1: float) -> dict[str, Any]:
    ok = [o for o in outcomes if o.ok]
    errors = [o for o in outcomes if not o.ok]
    # completions per second over the span in which they completed: ~ the offered rate while the
    # deployment keeps up (latency shifts both ends alike), lower as soon as a backlog builds up
    done = sorted(o.done for o in ok)
    span = done[-1] - done[0] if len(done) >= 2 else 0.0
    by_kind: dict[str, Any] = {}
    for kind in KINDS:
        mine = [o for o in outcomes if o.kind == kind]
        by_kind[kind] = {**percentiles([(o.done - o.scheduled) * 1e3 for o in mine if o.ok]),
                         "errors": sum(1 for o in mine if not o.ok)}
    statuses = Counter(str(o.status) for o in outcomes)
    samples = [o.error for o in errors[:5]]
    achieved = (len(done) - 1) / span if span > 0 else 0.0
    return {
        "offered_rps": rate, "duration_s": duration, "sent": len(outcomes), "ok": len(ok), "errors": len(errors),
        "achieved_rps": round(achieved, 2), "wall_s": round(t1 - t0, 2), "completion_span_s": round(span, 2),
        "sustained": not errors and achieved >= SUSTAINED_FRACTION * rate,
        "latency_ms": {"all": percentiles([(o.done - o.scheduled) * 1e3 for o in ok]), **by_kind},
        "statuses": dict(statuses), "error_samples": samples,
    }


# ----------------------------------------------------------------------------- the deployment
async def drive(base: str, work: Workload, args: argparse.Namespace, sampler: MemorySampler,
                log: Callable[[str], None]) -> dict[str, Any]:
    import httpx

    rng = np.random.default_rng(args.seed + 11)
    limits = httpx.Limits(max_connections=args.max_inflight, max_keepalive_connections=args.max_inflight)
    timeout = httpx.Timeout(args.timeout, pool=args.timeout)
    levels: list[dict[str, Any]] = []
    budget = args.max_requests
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=timeout) as client:
        warm, t0, t1 = await run_rate(client, work, args.warmup_rate, args.warmup, budget, args.max_inflight, rng)
        log(f"warm-up: {summarize(args.warmup_rate, args.warmup, warm, t0, t1)['latency_ms']['all']}")

        async def level(rate: float, duration: float, phase: str) -> dict[str, Any]:
            nonlocal budget
            load0 = load_average()
            outcomes, t0, t1 = await run_rate(client, work, rate, duration, budget, args.max_inflight, rng)
            budget -= len(outcomes)
            res = summarize(rate, duration, outcomes, t0, t1)
            res.update(phase=phase, load_average=[load0, load_average()],
                       window=[round(t0 - sampler.samples[0]["t"], 2), round(t1 - sampler.samples[0]["t"], 2)],
                       memory=memory_trend(sampler.window(t0, t1)),
                       memory_pss=memory_trend(sampler.window(t0, t1), "pss"))
            lat = res["latency_ms"]
            log(f"{phase} {rate:g} req/s: achieved {res['achieved_rps']} ok {res['ok']}/{res['sent']} "
                f"errors {res['errors']} | " + " ".join(f"{k} p50 {lat[k].get('p50', '-')} p99 {lat[k].get('p99', '-')}"
                                                       for k in KINDS)
                + f" | rss {res['memory'].get('first_third_mb')} -> {res['memory'].get('last_third_mb')} MB"
                + f" | load {load_average()}")
            await asyncio.sleep(args.pause)
            return res

        for rate in args.rates:
            if budget < rate * args.duration:
                log(f"stopping: the request budget ({budget} left) does not cover {rate:g} req/s")
                break
            res = await level(rate, args.duration, "ramp")
            levels.append(res)
            if not res["sustained"]:
                break
        sustained = [lv for lv in levels if lv["sustained"]]
        soak = None
        if sustained and args.soak > 0:
            best = max(lv["offered_rps"] for lv in sustained)
            soak_s = min(args.soak, budget / best)
            if soak_s >= 9:
                soak = await level(best, soak_s, "soak")
    return {"levels": levels, "soak": soak}


# ----------------------------------------------------------------------------- report
def main(argv: list[str] | None = None) -> int:
    p = parser(__name__, __doc__)
    p.add_argument("--entries", type=int, default=20_000)
    p.add_argument("--users", type=int, default=200)
    p.add_argument("--shards", type=int, default=4)
    p.add_argument("--rates", type=float, nargs="+", default=[5, 10, 20, 40, 80, 160])
    p.add_argument("--duration", type=float, default=20.0, help="seconds per rate")
    p.add_argument("--soak", type=float, default=60.0, help="seconds at the highest sustained rate (0: none)")
    p.add_argument("--warmup", type=float, default=5.0, help="seconds of unreported warm-up")
    p.add_argument("--warmup-rate", type=float, default=5.0)
    p.add_argument("--pause", type=float, default=3.0, help="seconds between rates")
    p.add_argument("--max-requests", type=int, default=30_000, help="request budget of the whole run")
    p.add_argument("--max-inflight", type=int, default=256)
    p.add_argument("--timeout", type=float, default=30.0, help="per-request timeout, seconds")
    p.add_argument("--flat-pct", type=float, default=5.0)
    p.add_argument("--embedder", default=None, help="embedder kind (default: the settings default)")
    p.add_argument("--port", type=int, default=8124)
    p.add_argument("--ingress", choices=["proxy", "haproxy"], default="proxy", help="http.ingress")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=str(RESULTS / "load.json"))
    p.add_argument("--replot", action="store_true", help="only redraw the .png and .md of an existing --out")
    args = p.parse_args(argv)
    if args.replot:
        out = Path(args.out)
        res: dict[str, Any] = json.loads(out.read_text())
        plot(res, res["memory_samples"], out.with_suffix(".png"))
        out.with_suffix(".md").write_text(report(res))
        print(report(res))
        return 0

    def log(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)

    from memcore.factory import build_embedder
    from memcore.settings import Settings

    data_dir = Path(tempfile.mkdtemp(prefix="memcluster-load-"))
    overrides: dict[str, Any] = {"data_dir": data_dir, "shards": args.shards, "namespace": "memcluster-load",
                                 "http": {"ingress": args.ingress}}
    if args.embedder:
        overrides["embedder"] = {"kind": args.embedder}
    settings = Settings(**overrides)
    started = time.monotonic()
    try:
        embedder = build_embedder(settings.embedder)
        data = served_data(embedder, settings.embedder.kind, args.entries, args.users, args.seed, log=log)
        turns, questions = load_locomo()
        for core in populate(settings, embedder, data):
            core.close()
        users, meta = np.unique(data.user_of), data.meta
        del embedder, data  # the stores hold the entries now
        work = Workload(users=[int(u) for u in users], questions=[q.question for q in questions],
                        turns=[t.turn.text for t in turns], rng=np.random.default_rng(args.seed))
        res = {"machine": machine_info(), "config": {
            "entries": args.entries, "users": args.users, "shards": settings.shards,
            "embedder": settings.embedder.kind, "ingress": args.ingress,
            "embed_passages_per_s": meta.get("passages_per_s"),
            "rates": args.rates, "duration_s": args.duration, "soak_s": args.soak, "mix": dict(zip(KINDS, MIX,
                                                                                                  strict=True)),
            "max_inflight": args.max_inflight, "timeout_s": args.timeout, "max_requests": args.max_requests,
            "arrivals": "poisson", "seed": args.seed}}
        base_url = start_serve(settings, args.port, object_store_memory=300_000_000)
        log(f"Serve ready at {base_url} ({time.monotonic() - started:.0f} s since start)")
        sampler = MemorySampler()
        sampler.start()
        try:
            res.update(asyncio.run(drive(base_url, work, args, sampler, log)))
        finally:
            sampler.stop()
            stop_serve()
        res["goals"] = goals(res, args.flat_pct)
        res["memory_samples"] = [{**s, "t": round(s["t"] - sampler.samples[0]["t"], 2)} for s in sampler.samples]
        res["total_s"] = round(time.monotonic() - started, 1)
        out = Path(args.out)
        write_json(out, res)
        plot(res, sampler.samples, out.with_suffix(".png"))
        out.with_suffix(".md").write_text(report(res))
        print(report(res))
        return 0
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
