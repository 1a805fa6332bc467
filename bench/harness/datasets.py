"""Synthetic memory datasets drawn from LoCoMo's turns (:func:`bench.harness.locomo.load_locomo`), and the
vector cache the benchmarks share (``bench/results/cache``).

LoCoMo-10 (``../shared/data/locomo/locomo10.json``) is CC BY-NC 4.0: evaluation use only.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.harness.locomo import load_locomo
from bench.harness.report import RESULTS, load_average

CACHE = RESULTS / "cache"


def embed_cached(
    name: str,
    texts_for: Callable[[int], list[str]],
    n: int,
    embed: Callable[[list[str]], np.ndarray],
    log: Callable[[str], None] = print,
    chunk: int = 8192,
) -> tuple[np.ndarray, dict[str, Any]]:
    """Vectors of ``texts_for(n)``, cached as ``CACHE/{name}_n{n}.npy`` (+ ``.json`` with a text digest).

    Any cache ``{name}_n{m}.npy`` with m >= n whose texts_for(m) digest matches is reused (prefix-stable
    data sets share one cache). Embedding is resumable: a ``.partial.npy`` is saved after every chunk.
    """
    CACHE.mkdir(parents=True, exist_ok=True)

    def digest(texts: list[str]) -> str:
        return hashlib.sha256("\n".join(texts).encode()).hexdigest()

    found = [p for p in CACHE.glob(f"{name}_n*.npy") if p.stem.rsplit("_n", 1)[1].isdigit()]
    for path in sorted(found, key=lambda p: int(p.stem.rsplit("_n", 1)[1])):
        m, meta_path = int(path.stem.rsplit("_n", 1)[1]), path.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        if m >= n and meta.get("sha256") == digest(texts_for(m)):
            log(f"vectors: cache hit {path.name}")
            return np.load(path)[:n], meta
    texts = texts_for(n)
    part = CACHE / f"{name}_n{n}.partial.npy"
    done = np.load(part) if part.exists() else None
    start, t0 = (0 if done is None else len(done)), time.perf_counter()
    for lo in range(start, n, chunk):
        vecs = np.asarray(embed(texts[lo : lo + chunk]), dtype=np.float32)
        done = vecs if done is None else np.concatenate([done, vecs])
        np.save(part, done)
        rate = (len(done) - start) / (time.perf_counter() - t0)
        log(f"vectors: {len(done)}/{n} embedded ({rate:.0f} passages/s, load {load_average()})")
    assert done is not None
    meta = {"sha256": digest(texts), "n": n, "passages_per_s": round((n - start) / (time.perf_counter() - t0), 1)}
    np.save(CACHE / f"{name}_n{n}.npy", done)
    (CACHE / f"{name}_n{n}.json").write_text(json.dumps(meta))
    part.unlink(missing_ok=True)
    return done, meta


_SENTENCE = re.compile(r"[^.!?]+[.!?]?")


def sentences(text: str) -> list[str]:
    """Rough sentence split (enough to recombine dialogue text into variants)."""
    return [s.strip() for s in _SENTENCE.findall(text) if len(s.strip()) > 12]


def memory_texts(n: int, seed: int) -> tuple[list[str], list[int]]:
    """``n`` distinct memory texts and the LoCoMo turn each is based on (deterministic, prefix-stable in ``n``).

    The 5,882 turns first (shuffled); past them each text is a turn plus a sentence of another turn.
    """
    turns, _ = load_locomo()
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(turns))
    texts: list[str] = []
    base: list[int] = []
    seen: set[str] = set()
    for i in range(n):
        t = int(order[i % len(turns)])
        text = turns[t].text
        while text in seen:  # a variant: the turn plus a sentence of another (random) turn
            other = turns[int(rng.integers(len(turns)))]
            parts = sentences(other.turn.text) or [other.text]
            text = f"{turns[t].text} {parts[int(rng.integers(len(parts)))]}"
        seen.add(text)
        texts.append(text)
        base.append(t)
    return texts, base


def memory_dataset(
    texts: list[str], base: list[int], seed: int, users: int, sigma: float = 0.8
) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Memory dicts (``Memory`` fields) and their user index (0..users-1) for ``memory_texts`` output.

    Users get log-normal weights (``sigma``); ~10 % of entries are episodes with the session's time.
    """
    turns, _ = load_locomo()
    weights = np.random.default_rng(seed + 3).lognormal(0.0, sigma, users)
    draws = np.random.default_rng(seed + 1).random(len(texts))
    user_of = np.minimum(np.searchsorted(np.cumsum(weights) / weights.sum(), draws, side="right"), users - 1)
    episode = np.random.default_rng(seed + 2).random(len(texts)) < 0.10
    mems = []
    for i, text in enumerate(texts):
        said = turns[base[i]]
        mem: dict[str, Any] = {"text": text, "provenance": [f"c{said.conv}:{said.turn.id}"]}
        if episode[i]:
            mem.update(kind="episode", event_time=said.when.isoformat(), participants=[said.speaker])
        mems.append(mem)
    return mems, user_of
