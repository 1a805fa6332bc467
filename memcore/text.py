"""Text utilities shared by ids, dedup, reconcile and the update policies.

Tokens are lower-cased English words / numbers and single CJK characters, so
"我喜欢Go 1.21" tokenises to ``['我', '喜', '欢', 'go', '1.21']``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

CJK_RANGES = (
    "\u3040-\u30ff"  # hiragana, katakana
    "\u3400-\u4dbf"  # CJK ext A
    "\u4e00-\u9fff"  # CJK unified
    "\uf900-\ufaff"  # compatibility ideographs
    "\uac00-\ud7af"  # hangul syllables
)
_TOKEN_RE = re.compile(rf"[{CJK_RANGES}]|[^\W_{CJK_RANGES}]+(?:[.'’][^\W_{CJK_RANGES}]+)*", re.UNICODE)
_CJK_RE = re.compile(rf"[{CJK_RANGES}]")
_SPACE_RE = re.compile(r"\s+")

NEGATION_WORDS: frozenset[str] = frozenset(
    {
        "no", "not", "never", "none", "nobody", "nothing", "neither", "nor", "without",
        "cannot", "can't", "cant", "don't", "dont", "doesn't", "doesnt", "didn't", "didnt",
        "isn't", "isnt", "aren't", "arent", "wasn't", "wasnt", "weren't", "werent",
        "won't", "wont", "wouldn't", "shouldn't", "hasn't", "haven't", "hadn't",
        "不", "没", "无", "非", "别",
    }
)

CHANGE_MARKERS: tuple[str, ...] = (
    "now", "no longer", "instead", "anymore", "any more", "switched", "changed",
    "moved to", "used to", "stopped", "quit", "replaced", "formerly", "previously",
    "现在", "不再", "改为",
)


def normalize(text: str) -> str:
    """NFKC, lower case, collapsed whitespace, stripped. The id of a memory hashes this."""
    return _SPACE_RE.sub(" ", unicodedata.normalize("NFKC", text)).strip().lower()


def tokenize(text: str) -> list[str]:
    """English words/numbers (lower-cased) and single CJK characters, in order."""
    return _TOKEN_RE.findall(unicodedata.normalize("NFKC", text).lower())


def has_cjk(text: str) -> bool:
    return _CJK_RE.search(text) is not None


def word_set(text: str) -> frozenset[str]:
    return frozenset(tokenize(text))


def jaccard(a: str | Iterable[str], b: str | Iterable[str]) -> float:
    """Jaccard similarity of the token sets of two texts (or two token iterables)."""
    sa = word_set(a) if isinstance(a, str) else frozenset(a)
    sb = word_set(b) if isinstance(b, str) else frozenset(b)
    if not sa and not sb:
        return 1.0
    union = sa | sb
    return len(sa & sb) / len(union)


def numbers(text: str) -> list[str]:
    """Numbers as written ("1.21", "500", "4pm" -> "4"), thousands separators removed."""
    out: list[str] = []
    for m in re.finditer(r"\d+(?:[.,:]\d+)*", text):
        out.append(m.group(0).replace(",", ""))
    return out


def negations(text: str) -> list[str]:
    """Negation words present in the text, in order."""
    toks = tokenize(text)
    found = [t for t in toks if t in NEGATION_WORDS]
    low = text.lower()
    if "no longer" in low and "no" not in found:
        found.append("no")
    return found


def change_markers(text: str) -> set[str]:
    """Phrases that signal a state change ("now", "no longer", "instead", ...)."""
    low = f" {normalize(text)} "
    found: set[str] = set()
    for marker in CHANGE_MARKERS:
        if has_cjk(marker):
            if marker in low:
                found.add(marker)
        elif re.search(rf"(?<![\w]){re.escape(marker)}(?![\w])", low):
            found.add(marker)
    return found


def coverage(old: str, new: str) -> float:
    """Share of the old text's distinct tokens that appear in the new text."""
    so, sn = word_set(old), word_set(new)
    if not so:
        return 1.0
    return len(so & sn) / len(so)


def in_order(old: str, new: str) -> bool:
    """True when the old tokens appear in the new text as a subsequence (same order)."""
    it = iter(tokenize(new))
    return all(tok in it for tok in tokenize(old))
