"""Timing of the benchmarks: percentiles, a stopwatch, instrumented calls, profiles."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np


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


def fmt_ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


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

