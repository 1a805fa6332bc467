"""The knowledge graph's part of a search or a preload (``include_facts``): the current facts of the entities
a query names, within half of the token budget, as lines of text."""

from __future__ import annotations

from collections.abc import Callable

from memcore.graph import Fact
from memcore.knowledge import KnowledgeGraph
from memcore.model import UserKey

SEARCH_FACTS = 10
"""Most facts a search or preload adds (``include_facts``)."""


def fact_line(fact: Fact) -> str:
    """A fact as one line of text (what a budget counts and a preload block shows)."""
    since = f" (since {fact.valid_from.date().isoformat()})" if fact.valid_from else ""
    return f"{fact.subject_name} {fact.predicate.replace('_', ' ')} {fact.object_name}{since}"


def facts_for_search(kg: KnowledgeGraph, key: UserKey, query: str, max_tokens: int | None,
                     count: Callable[[str], int]) -> tuple[list[Fact], int | None]:
    """The current facts of the entities ``query`` names (at most :data:`SEARCH_FACTS`) that fit half of
    ``max_tokens`` (counted by ``count`` over :func:`fact_line`), and the budget left for the memory hits
    (None: no budget)."""
    facts = kg.current_for_text(key, query, limit=SEARCH_FACTS) if query.strip() else []
    if max_tokens is None:
        return facts, None
    room, kept = max_tokens // 2, []
    for f in facts:
        cost = count(fact_line(f))
        if cost > room:
            break
        kept.append(f)
        room -= cost
    used = max_tokens // 2 - room
    return kept, max(1, max_tokens - used)
