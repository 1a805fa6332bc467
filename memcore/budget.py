"""Token budgets: how results are counted and fitted into ``max_tokens``.

The one home of the token counter (pluggable: ``whitespace`` by default, ``tokenizer`` for the BERT
WordPiece count of the vendored ``tokenizer.json``) and of the fitting rule shared by search, preload
and ``memory_search``:

- hits are taken in rank order while they fit whole;
- the first one that does not fit is, when it is a verbatim episode (one line per turn, what the
  verbatim extractor writes and :func:`memcore.fusion.merge_overlapping` merges), cut to the turns
  that match the query best that fit, kept in their order, its ``provenance`` reduced to exactly
  those turns and ``cut`` listing the turns left out; any other hit that does not fit ends the list;
- the total count of the returned texts never exceeds the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import lru_cache

from memcore.fusion import turn_lines
from memcore.model import Entry, SearchHit
from memcore.query import content_query
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


def fit_hits(hits: Sequence[SearchHit], max_tokens: int, query: str, count: TokenCounter = whitespace_count,
             ) -> list[SearchHit]:
    """The hits that fit ``max_tokens`` (see the module docstring); the sum of their counts <= the budget."""
    out: list[SearchHit] = []
    left = max_tokens
    for hit in hits:
        cost = count(hit.entry.text)
        if cost <= left:
            out.append(hit)
            left -= cost
            continue
        cut = cut_entry(hit.entry, query, left, count)
        if cut is not None:
            entry, dropped = cut
            out.append(hit.model_copy(update={"entry": entry, "cut": dropped}))
        break
    return out
