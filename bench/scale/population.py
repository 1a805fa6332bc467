"""The scale benchmark's population: many users with skewed sizes, LoCoMo texts, derived vectors.

Users come one after another (complete users, random sizes), so the first ``n`` entries of the
population are a store of ``n`` entries and a run can grow one store 10k -> 100k -> 1M. Sizes are
Pareto (``alpha``, at least ``min_size``, capped): most users hold a few dozen entries, a few at 1M
hold 10k+. Entry ``i`` is ``memory_texts(n)[i]`` (a LoCoMo turn, or a turn plus a sentence of another
turn, all distinct); its archived turn is that text (the verbatim extractor stores turns as they are).

Vectors: real embeddings of the 5,882 LoCoMo turns by the default embedder (cached), mixed and
renormalised per entry: ``normalize(E[turn] + mix * E[other] + noise * g)`` with ``g`` a random unit
vector; deterministic per entry, computed batch by batch (never the whole matrix at once).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import numpy as np

from bench.harness.datasets import embed_cached, memory_texts
from bench.harness.locomo import Utterance, load_locomo

APP = "scale"
SESSION_TURNS = 20


@dataclass
class Population:
    texts: list[str]
    base: np.ndarray  # LoCoMo turn index of each entry
    other: np.ndarray  # the turn mixed into its vector
    user_of: np.ndarray  # user index of each entry (users are contiguous runs)
    starts: np.ndarray  # first entry of each user (len users + 1)
    turns: list[Utterance]
    turn_vecs: np.ndarray
    seed: int
    mix: float
    noise: float

    def users_in(self, n: int) -> int:
        """Users with at least one of the first ``n`` entries."""
        return int(np.searchsorted(self.starts, n, side="left"))

    def sizes(self, n: int) -> np.ndarray:
        """Entries of each user among the first ``n``."""
        users = self.users_in(n)
        return np.minimum(self.starts[1 : users + 1], n) - self.starts[:users]

    def vectors(self, lo: int, hi: int) -> np.ndarray:
        """Vectors of entries ``lo .. hi-1`` (float32, unit norm; the same whatever the batch bounds)."""
        out = self.turn_vecs[self.base[lo:hi]] + self.mix * self.turn_vecs[self.other[lo:hi]]
        g = np.stack([np.random.default_rng((self.seed, i)).standard_normal(self.turn_vecs.shape[1])
                      for i in range(lo, hi)]).astype(np.float32)
        out += self.noise * g / np.linalg.norm(g, axis=1, keepdims=True)
        return (out / np.linalg.norm(out, axis=1, keepdims=True)).astype(np.float32)


def user_key(u: int) -> Any:
    from memcore.model import UserKey

    return UserKey(app=APP, user=f"s{u:06d}")


def user_sizes(total: int, seed: int, alpha: float, min_size: int, cap: int) -> np.ndarray:
    """Pareto sizes (at least ``min_size``, at most ``cap``) summing to at least ``total``."""
    rng = np.random.default_rng(seed + 11)
    sizes: list[int] = []
    while sum(sizes) < total:
        draw = (rng.pareto(alpha, 4096) + 1.0) * min_size
        sizes += np.minimum(draw, cap).astype(int).tolist()
    cum = np.cumsum(sizes)
    return np.asarray(sizes[: int(np.searchsorted(cum, total)) + 1], dtype=np.int64)


def population(n: int, embed: Callable[[list[str]], np.ndarray], embedder_name: str, *, seed: int = 7,
               alpha: float = 1.1, min_size: int = 8, cap: int = 40_000, mix: float = 0.35,
               noise: float = 0.25, log: Callable[[str], None] = print) -> Population:
    turns, _ = load_locomo()
    turn_texts = [t.text for t in turns]
    turn_vecs, _ = embed_cached(f"locomo_turns_{embedder_name}", lambda m: turn_texts[:m], len(turns), embed, log)
    texts, base = memory_texts(n, seed)
    sizes = user_sizes(n, seed, alpha, min_size, cap)
    starts = np.concatenate([[0], np.cumsum(sizes)])
    user_of = np.repeat(np.arange(len(sizes)), sizes)[:n]
    other = np.random.default_rng(seed + 13).integers(len(turns), size=n)
    return Population(texts, np.asarray(base), other, user_of, starts, turns, turn_vecs.astype(np.float32), seed,
                      mix, noise)


def backfill_calls(pop: Population, lo: int, hi: int, batch: int) -> Iterator[tuple[Any, list, list, np.ndarray]]:
    """``ShardCore.backfill`` arguments for entries ``lo .. hi-1``: per user, at most ``batch`` entries a call,
    each entry archived as one turn of a session of ``SESSION_TURNS`` turns (provenance = that turn)."""
    i = lo
    while i < hi:
        u = int(pop.user_of[i])
        end = min(hi, int(pop.starts[u + 1]), i + batch)
        sessions: dict[str, list[dict[str, Any]]] = {}
        mems = []
        for j in range(i, end):
            local = j - int(pop.starts[u])
            turn = pop.turns[int(pop.base[j])]
            sid = f"sess-{local // SESSION_TURNS:05d}"
            eid = f"t{local:06d}"
            when = turn.when + timedelta(seconds=local % SESSION_TURNS)
            role = "user" if local % 2 == 0 else "assistant"
            sessions.setdefault(sid, []).append({"id": eid, "role": role, "content": pop.texts[j],
                                                 "timestamp": when.isoformat()})
            mem: dict[str, Any] = {"text": pop.texts[j], "provenance": [eid]}
            if local % 10 == 0:
                mem.update(kind="episode", event_time=when.isoformat(), participants=[turn.speaker])
            mems.append(mem)
        yield user_key(u), list(sessions.items()), mems, pop.vectors(i, end)
        i = end


def fresh_calls(pop: Population, lo: int, hi: int, n: int, per_call: int, seed: int
                ) -> Iterator[tuple[Any, list, list, np.ndarray]]:
    """``ShardCore.backfill`` arguments writing entries ``lo .. hi-1`` as new memories of users already in the
    first ``n`` entries: ``per_call`` entries (a session's new turns) to a random such user per call."""
    rng = np.random.default_rng((seed, lo))
    users = pop.users_in(n)
    for start in range(lo, hi, per_call):
        u, end = int(rng.integers(users)), min(hi, start + per_call)
        sid = f"fresh-{start:07d}"
        turns = [pop.turns[int(pop.base[j])] for j in range(start, end)]
        events = [{"id": f"f{j:07d}", "role": "user" if j % 2 == 0 else "assistant", "content": pop.texts[j],
                   "timestamp": (t.when + timedelta(seconds=j - start)).isoformat()}
                  for j, t in zip(range(start, end), turns, strict=True)]
        mems = [{"text": pop.texts[j], "provenance": [f"f{j:07d}"]} for j in range(start, end)]
        yield user_key(u), [(sid, events)], mems, pop.vectors(start, end)
