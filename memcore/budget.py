"""Token budgets: how results are counted and fitted into ``max_tokens``.

The one home of the token counter (pluggable: ``whitespace`` by default, ``tokenizer`` for the BERT
WordPiece count of the vendored ``tokenizer.json``) and of the fitting rules.

Search and ``memory_search`` (:func:`fit_hits`): when the hits fit whole they are returned as they are.
Otherwise the budget goes to the parts that carry the match, turn by turn: every turn of a verbatim
episode (one line per turn, what the verbatim extractor writes and :func:`memcore.fusion.merge_overlapping`
merges) and every other hit as a whole is a unit, scored by its *support* (the sum of ``1 / (SUPPORT_K +
rank)`` over the ranked, unmerged windows that hold it: a turn that several good windows share beats a
neighbour only one of them brought along) times ``1 + MATCH_WEIGHT`` per query word it contains. Units are
taken best first while they fit; each hit then keeps its chosen turns in their order, ``provenance``
reduced to exactly those turns and ``cut`` listing the turns left out; hits keep their rank order and a
hit with nothing chosen is left out. Measured on LoCoMo (``docs/benchmarks.md``, "Within a token
budget"), this holds far more evidence per token than whole windows in rank order.

Preload (:func:`memcore.preload.fit`) renders entries in order, the first one that does not fit whole cut
to its turns matching the query best (:func:`cut_entry`): every entry line there pays its own prefix.

In both, the total count of the returned texts never exceeds the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache

from memcore.fusion import turn_lines
from memcore.model import Entry
from memcore.query import content_query
from memcore.search_model import SearchHit
from memcore.text import word_set
from memcore.vocabulary import COUNTERS, CounterName

TokenCounter = Callable[[str], int]


def whitespace_count(text: str) -> int:
    """Whitespace-separated words: the default count."""
    return len(text.split())


class TokenizerCount:
    """The count of a Hugging Face ``tokenizers`` tokenizer (no special tokens, no truncation)."""

    def __init__(self, path: str) -> None:
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(path)
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()

    def __call__(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids) if text else 0


@lru_cache(maxsize=4)
def counter(name: CounterName = "whitespace") -> TokenCounter:
    """The counter called ``name`` (loaded once per process)."""
    if name == "whitespace":
        return whitespace_count
    if name == "tokenizer":
        from memcore.stores.onnx_embedder import TOKENIZER_PATH

        return TokenizerCount(str(TOKENIZER_PATH))
    raise ValueError(f"token counter must be one of {', '.join(COUNTERS)}, got {name!r}")


def cut_entry(entry: Entry, query: str, budget: int, count: TokenCounter) -> tuple[Entry, list[str]] | None:
    """``entry`` reduced to the turns matching ``query`` best that fit ``budget`` (in their order), with
    the turn ids left out; None when it is no verbatim episode or not even one turn fits."""
    pairs = turn_lines(entry)
    if pairs is None or budget <= 0:
        return None
    words = word_set(content_query(query))
    centre = (len(pairs) - 1) / 2
    # Best match first: most query words, then nearest the window's centre (the turn that was indexed).
    order = sorted(range(len(pairs)), key=lambda i: (-len(word_set(pairs[i][1]) & words), abs(i - centre), i))
    chosen: list[int] = []
    for i in order:
        trial = sorted([*chosen, i])
        if count("\n".join(pairs[j][1] for j in trial)) <= budget:
            chosen = trial
    if not chosen:
        return None
    kept = set(chosen)
    reduced = entry.model_copy(update={"text": "\n".join(pairs[j][1] for j in chosen),
                                       "provenance": [pairs[j][0] for j in chosen]})
    return reduced, [pairs[j][0] for j in range(len(pairs)) if j not in kept]


SUPPORT_K = 5.0
"""Rank offset of a unit's support: ``1 / (SUPPORT_K + rank)`` per ranked window that holds it."""
MATCH_WEIGHT = 0.3
"""Each query word a unit contains multiplies its support by ``1 + MATCH_WEIGHT`` (additively per word)."""


def fit_hits(hits: Sequence[SearchHit], max_tokens: int, query: str, count: TokenCounter = whitespace_count,
             windows: Sequence[SearchHit] | None = None) -> list[SearchHit]:
    """``hits`` within ``max_tokens`` (see the module docstring); the sum of their counts <= the budget.

    ``windows``: the ranked hits before merging, whose ranks give each turn its support (default: ``hits``).
    """
    if sum(count(h.entry.text) for h in hits) <= max_tokens:
        return list(hits)
    words = word_set(content_query(query))
    turn_support, entry_support = _support(windows if windows is not None else hits)
    units: list[_Unit] = []
    for g, hit in enumerate(hits):
        pairs = turn_lines(hit.entry)
        if pairs is None:
            base = entry_support.get(hit.entry.id, 1.0 / (SUPPORT_K + g))
            units.append(_Unit(base * _match(hit.entry.text, words), g, 0, count(hit.entry.text)))
            continue
        for i, (turn, text) in enumerate(pairs):
            base = turn_support.get(turn, 1.0 / (SUPPORT_K + g))
            units.append(_Unit(base * _match(text, words), g, i, count(text)))
    chosen: list[_Unit] = []
    left = max_tokens
    for unit in sorted(units, key=lambda u: (-u.score, u.hit, u.part)):
        if unit.cost <= left:
            chosen.append(unit)
            left -= unit.cost
    while chosen:  # a count that is not additive over lines (a tokenizer) is checked on the real texts
        out = _assemble(hits, chosen)
        if sum(count(h.entry.text) for h in out) <= max_tokens:
            return out
        chosen.pop()
    return []


@dataclass(frozen=True, slots=True)
class _Unit:
    """A turn of a verbatim hit (``part``: its line) or a whole other hit (``part`` 0), with its score."""

    score: float
    hit: int
    part: int
    cost: int


def _match(text: str, words: frozenset[str]) -> float:
    return 1.0 + MATCH_WEIGHT * len(word_set(text) & words) if words else 1.0


def _support(windows: Sequence[SearchHit]) -> tuple[dict[str, float], dict[str, float]]:
    """Turn id → support, and entry id → support, from the ranked windows."""
    turns: dict[str, float] = {}
    entries: dict[str, float] = {}
    for rank, hit in enumerate(windows):
        weight = 1.0 / (SUPPORT_K + rank)
        entries.setdefault(hit.entry.id, weight)
        for turn in dict.fromkeys(hit.entry.provenance) if turn_lines(hit.entry) is not None else ():
            turns[turn] = turns.get(turn, 0.0) + weight
    return turns, entries


def _assemble(hits: Sequence[SearchHit], chosen: Sequence[_Unit]) -> list[SearchHit]:
    parts: dict[int, set[int]] = {}
    for unit in chosen:
        parts.setdefault(unit.hit, set()).add(unit.part)
    out: list[SearchHit] = []
    for g, hit in enumerate(hits):
        kept = parts.get(g)
        if not kept:
            continue
        pairs = turn_lines(hit.entry)
        if pairs is None or len(kept) == len(pairs):
            out.append(hit)
            continue
        idx = sorted(kept)
        entry = hit.entry.model_copy(update={"text": "\n".join(pairs[i][1] for i in idx),
                                             "provenance": [pairs[i][0] for i in idx]})
        out.append(hit.model_copy(update={"entry": entry, "cut": [t for i, (t, _) in enumerate(pairs)
                                                                   if i not in kept]}))
    return out
