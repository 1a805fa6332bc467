"""Helpers shared by the benchmarks: timing percentiles, machine info, LoCoMo data, plot style.

LoCoMo-10 (``../shared/data/locomo/locomo10.json``) is CC BY-NC 4.0: evaluation use only.
Nothing here imports the heavy engines; each benchmark imports what it measures.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from jobs.locomo import parse_time

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
CACHE = RESULTS / "cache"
LOCOMO = ROOT.parent / "shared" / "data" / "locomo" / "locomo10.json"

# ----------------------------------------------------------------------------- timing


def percentiles(samples_ms: Sequence[float]) -> dict[str, float]:
    """p50 / p90 / p99 / mean / max (milliseconds) and the sample count."""
    arr = np.asarray(samples_ms, dtype=np.float64)
    if arr.size == 0:
        return {"n": 0}
    p50, p90, p99 = np.percentile(arr, [50, 90, 99])
    return {
        "n": int(arr.size),
        "p50": round(float(p50), 4),
        "p90": round(float(p90), 4),
        "p99": round(float(p99), 4),
        "mean": round(float(arr.mean()), 4),
        "max": round(float(arr.max()), 4),
    }


def time_calls(fn: Callable[[Any], object], items: Iterable[Any], *, warmup: int = 0) -> list[float]:
    """Calls ``fn(item)`` for each item and returns per-call wall times in ms.

    The first ``warmup`` items are called (cycling the input if it is shorter) but not timed.
    """
    items = list(items)
    for i in range(min(warmup, len(items) * 4)):
        fn(items[i % len(items)])
    out: list[float] = []
    for item in items:
        t0 = time.perf_counter()
        fn(item)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


class Stopwatch:
    """``with sw: ...`` accumulates elapsed seconds in ``sw.seconds``."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._t0 = 0.0

    def __enter__(self) -> Stopwatch:
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds += time.perf_counter() - self._t0


@contextmanager
def instrumented(targets: Sequence[tuple[Any, str, Stopwatch]]) -> Iterator[None]:
    """Temporarily wrap ``obj.attr`` (a method or module function) so its calls add to a Stopwatch.

    Profiling from the outside: nothing in the measured code changes, and the originals come back.
    """
    saved = [(obj, attr, getattr(obj, attr), attr in vars(obj)) for obj, attr, _ in targets]

    def wrap(fn: Callable[..., Any], sw: Stopwatch) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            with sw:
                return fn(*args, **kwargs)

        return timed

    try:
        for (obj, attr, fn, _), (_, _, sw) in zip(saved, targets, strict=True):
            setattr(obj, attr, wrap(fn, sw))
        yield
    finally:
        for obj, attr, fn, own in reversed(saved):
            if own:
                setattr(obj, attr, fn)
            else:  # a method found on the class: drop the instance attribute
                delattr(obj, attr)


def machine_info() -> dict[str, Any]:
    """CPU, memory, load average and library versions: what a reader needs to compare runs."""
    from importlib.metadata import PackageNotFoundError, version

    cpu = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem_gb = None
    try:
        pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
        mem_gb = round(pages * size / 2**30, 1)
    except (ValueError, OSError):
        pass
    versions: dict[str, str] = {}
    for pkg in ("numpy", "torch", "sentence-transformers", "qdrant-edge-py", "qdrant-client", "tantivy", "pydantic"):
        try:
            versions[pkg] = version(pkg)
        except PackageNotFoundError:
            pass
    return {
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": versions,
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")


def md_table(headers: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    """A GitHub markdown table as lines."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return out


# ----------------------------------------------------------------------------- embeddings


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


# ----------------------------------------------------------------------------- LoCoMo


@dataclass(frozen=True)
class Turn:
    conv: int  # conversation index 0..9
    session: int  # session number (1-based)
    dia_id: str  # e.g. "D3:5"
    speaker: str
    text: str  # "Speaker: text"
    when: datetime | None  # the session's date/time (UTC), when parsable


@dataclass(frozen=True)
class Question:
    conv: int
    text: str
    category: int
    evidence: tuple[str, ...]


_SESSION_KEY = re.compile(r"^session_(\d+)$")


def load_locomo(path: Path = LOCOMO) -> tuple[list[Turn], list[Question]]:
    """Every dialogue turn (in conversation/session/turn order) and every QA question."""
    data = json.loads(path.read_text())
    turns: list[Turn] = []
    questions: list[Question] = []
    for ci, sample in enumerate(data):
        conv = sample["conversation"]
        sessions = sorted(
            (int(m.group(1)), k) for k in conv if (m := _SESSION_KEY.match(k)) and isinstance(conv[k], list)
        )
        for num, key in sessions:
            when = parse_time(str(conv.get(f"{key}_date_time", "")))
            for turn in conv[key]:
                text = str(turn.get("text", "")).strip()
                if not text:
                    continue
                speaker = str(turn.get("speaker", "")).strip() or "Someone"
                turns.append(Turn(ci, num, str(turn.get("dia_id", "")), speaker, f"{speaker}: {text}", when))
        for qa in sample.get("qa", []):
            q = str(qa.get("question", "")).strip()
            if q:
                ev = tuple(str(e) for e in qa.get("evidence", []) or [])
                questions.append(Question(ci, q, int(qa.get("category", 0)), ev))
    return turns, questions


_SENTENCE = re.compile(r"[^.!?]+[.!?]?")


def sentences(text: str) -> list[str]:
    """Rough sentence split (enough to recombine dialogue text into variants)."""
    return [s.strip() for s in _SENTENCE.findall(text) if len(s.strip()) > 12]


# ----------------------------------------------------------------------------- memory data sets


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
            parts = sentences(other.text.split(": ", 1)[-1]) or [other.text]
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
        turn = turns[base[i]]
        mem: dict[str, Any] = {"text": text, "provenance": [f"c{turn.conv}:{turn.dia_id}"]}
        if episode[i] and turn.when is not None:
            mem.update(kind="episode", event_time=turn.when.isoformat(), participants=[turn.speaker])
        mems.append(mem)
    return mems, user_of


# ----------------------------------------------------------------------------- plotting

PALETTE = {
    "edge": "#1f77b4",
    "client_local": "#ff7f0e",
    "floor": "#7f7f7f",
    "embed": "#2ca02c",
    "target": "#d62728",
}


def plot_style() -> Any:
    """matplotlib (Agg backend) with the benchmarks' common style; returns ``pyplot``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "axes.grid": True,
            "grid.alpha": 0.3,
            "axes.spines.top": False,
            "axes.spines.right": False,
            "font.size": 9,
            "legend.fontsize": 8,
        }
    )
    return plt


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def latency_bars(ax: Any, categories: Sequence[str], series: dict[str, dict[str, dict[str, float]]]) -> None:
    """Grouped bars on ``ax``: per category, one bar per series, p50 solid over p99 hatched (log y).

    ``series`` maps a label (its colour from PALETTE, else the cycle) to {category: percentiles(...)};
    a category missing from a series leaves a gap. Labels are shown in the legend.
    """
    width = 0.8 / max(1, len(series))
    for s_i, (label, stats) in enumerate(series.items()):
        color = PALETTE.get(label.split(" ")[0], f"C{s_i}")
        off = (s_i - (len(series) - 1) / 2) * width
        xs = [c_i + off for c_i, c in enumerate(categories) if c in stats and stats[c].get("n")]
        st = [stats[c] for c in categories if c in stats and stats[c].get("n")]
        ax.bar(xs, [s["p99"] for s in st], width * 0.9, color=color, alpha=0.3, hatch="//")
        ax.bar(xs, [s["p50"] for s in st], width * 0.9, color=color, label=label)
    ax.set_yscale("log")
    ax.set_ylabel("ms (solid p50, hatched p99)")
    ax.set_xticks(range(len(categories)), [c.replace("_", "\n", 1) for c in categories], fontsize=7)


def topk(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest scores, best first (exact; argpartition then sort)."""
    kk = min(k, len(scores))
    if kk <= 0:
        return np.zeros(0, dtype=np.int64)
    part = np.argpartition(-scores, kk - 1)[:kk]
    return part[np.argsort(-scores[part])]


def profile_top(fn: Callable[[Any], object], items: Iterable[Any], top: int = 20) -> list[str]:
    """cProfile ``fn(item)`` over ``items``; the ``top`` functions by own time, as pstats lines."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for item in items:
        fn(item)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return [ln.rstrip() for ln in buf.getvalue().splitlines() if ln.strip()][-top - 1 :]
