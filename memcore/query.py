"""Query processing for hybrid search (question text only; no model).

- :func:`content_query`: the query without English stop words and question words — the text the
  BM25 list searches with (``keyword_query="content"``); names, numbers and topic words stay;
- :func:`query_dates`: the day or month a query names ("on 7 July, 2023", "in August 2023",
  "October 6, 2022", "4th October, 2023") and the query without it (the date boost searches that
  period and fuses the result in; see :mod:`memcore.search`);
- :func:`query_names`: the names a query gives (its capitalised words that start no sentence: people,
  places, titles), which a memory's relevance checks it for (:class:`memcore.relevance.Judge`).

Measured on LoCoMo (``bench/results/retrieval.md``): each adds 1.5-3 points of session recall@5.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: A compact English stop-word list plus question words: what carries no topic in a question.
STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below
    between both but by can could did do does doing down during each few for from further had has have having
    he her here hers herself him himself his how i if in into is it its itself just me more most my myself no
    nor not now of off on once only or other our ours ourselves out over own same she should so some such than
    that the their theirs them themselves then there these they this those through to too under until up very
    was we were what when where which while who whom why will with would you your yours yourself yourselves
    ever also likely might may kind type sort""".split()
)


def content_query(text: str) -> str:
    """``text`` without stop words / question words; ``text`` itself if nothing would be left."""
    words = [w for w in text.replace("?", " ").split() if w.strip(".,!;:'\"()").lower() not in STOP_WORDS]
    return " ".join(words) or text


_MONTHS = {m: i + 1 for i, m in enumerate(
    "january february march april may june july august september october november december".split())}
_MONTHS |= {m[:3]: i for m, i in list(_MONTHS.items())} | {"sept": 9}
_MON = (r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sept?(?:ember)?"
        r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)")
_DAY = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d\d)"
_DATE_PATTERNS = (
    (re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MON}\.?,?\s+{_YEAR}\b", re.I), ("d", "m", "y")),
    (re.compile(rf"\b{_MON}\.?\s+{_DAY},?\s+{_YEAR}\b", re.I), ("m", "d", "y")),
    (re.compile(rf"\b{_MON}\.?,?\s+(?:of\s+)?{_YEAR}\b", re.I), ("m", "y")),
)
_DANGLING = re.compile(r"\b(on|in|of|during|as of|before|after|since|by)\s*([?.!,]|$)", re.I)

Period = tuple[datetime, datetime]


def query_dates(text: str) -> tuple[Period | None, str]:
    """The period a query names (a day or a month, with its year; UTC, end exclusive) and the query without it.

    ``"What did X do on 7 July, 2023?"`` → ((7 July 2023, 8 July 2023), ``"What did X do?"``).
    A year alone ("in 2023") is not taken: in a history spanning a year or two it narrows little.
    """
    for pattern, parts in _DATE_PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        got = dict(zip(parts, m.groups(), strict=True))
        month = _MONTHS.get(got["m"].lower().rstrip("."))
        if month is None:
            continue
        try:
            year = int(got["y"])
            if "d" in got:
                start = datetime(year, month, int(got["d"]), tzinfo=UTC)
                end = start + timedelta(days=1)
            else:
                start = datetime(year, month, 1, tzinfo=UTC)
                end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        except ValueError:
            continue
        rest = " ".join((text[: m.start()] + text[m.end() :]).split()).replace(" ,", ",").replace(" ?", "?")
        return (start, end), _DANGLING.sub(r"\2", rest).replace(" ?", "?").strip()
    return None, text


_WEEKDAYS = frozenset("monday tuesday wednesday thursday friday saturday sunday".split())
_WORD = re.compile(r"[^\W\d_][\w'’-]*")
_SENTENCE_END = re.compile(r"[.?!:;\n\"“”()]+")
_CLITICS = frozenset("s m re ve ll d t".split())
"""What follows an apostrophe and is not part of a name: ``Andrew's``, ``I'm``, ``they've``."""


def query_names(text: str) -> frozenset[str]:
    """The names ``text`` gives, lowercased: its words that start with a capital and do not start a sentence
    (``"What did Caroline tell Mel about Becoming Nicole?"`` → caroline, mel, becoming, nicole), without a
    clitic (``Andrew's`` → andrew) and without stop words (``I``), months and weekdays (a date is no name;
    :func:`query_dates` takes the dates out first). A query in lower case, or in a script without capitals,
    names nothing: nothing is checked for it."""
    _, rest = query_dates(text)
    names: set[str] = set()
    for sentence in _SENTENCE_END.split(rest):
        for word in _WORD.findall(sentence)[1:]:
            if not word[0].isupper():
                continue
            head, _, tail = word.replace("’", "'").partition("'")
            name = (head if tail.lower() in _CLITICS else word).strip("'-").lower()
            if len(name) > 1 and name not in STOP_WORDS and name not in _MONTHS and name not in _WEEKDAYS:
                names.add(name)
    return frozenset(names)
