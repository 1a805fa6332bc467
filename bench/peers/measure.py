"""What every side of the side-by-side bench shares: the questions asked, one side's timed and scored searches
(:func:`measure`), the shape of a search's hits. :mod:`bench.peers.run` and the MemPalace side's own process
(:mod:`bench.peers.mempalace`) both import it."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.harness.locomo import QA, Conversation
from bench.harness.report import load_average
from bench.harness.timing import percentiles
from bench.retrieval.recall import HEADLINE, MAIN_CATEGORIES, Scored, aggregate, bootstrap_ci, score

TOP_K = 10
WARMUP = 20
Hits = list[tuple[str, tuple[str, ...]]]
"""One search's results, best first: (text, LoCoMo turn ids)."""
Log = Callable[[str], None]


def asked(convs: Sequence[Conversation]) -> list[tuple[Conversation, QA]]:
    """Every question with evidence, conversation by conversation."""
    return [(c, qa) for c in convs for qa in c.questions if qa.evidence]


def measure(name: str, questions: list[tuple[Conversation, QA]], search: Callable[[Conversation, str], Hits],
            ingest: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
    """``search`` each question (timed, after ``WARMUP`` untimed ones), scored; one side's results."""
    for conv, qa in questions[:WARMUP]:
        search(conv, qa.question)
    scored, ms = [], []
    for conv, qa in questions:
        t0 = time.perf_counter()
        hits = search(conv, qa.question)
        ms.append((time.perf_counter() - t0) * 1e3)
        scored.append(Scored(qa.category, score([t for _, t in hits], [x for x, _ in hits], qa.evidence)))
    out: dict[str, Any] = {"name": name, **aggregate(scored)}
    main = [s.metrics for s in scored if s.category in MAIN_CATEGORIES]
    out["ci95"] = bootstrap_ci(main, [*HEADLINE, "tokens@10"])
    out["search_ms"] = percentiles(ms)
    out["ingest"], out["config"], out["load_average"] = ingest, config, load_average()
    return out
