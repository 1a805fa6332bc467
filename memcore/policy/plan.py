"""What every update policy shares: the :class:`Plan` it returns for one operation and the
read-only :class:`Store` view it may consult while planning. Policies are pure decisions;
:mod:`memcore.policy.apply` executes the plans against a :class:`memcore.service.MemoryService`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from memcore.model import Entry, Memory
from memcore.search_model import SearchHit

Action = Literal["add", "update", "delete", "clear", "skip"]


@dataclass(frozen=True)
class Plan:
    """The decision for one operation: what to write (``memory``), onto what (``target``), and why."""

    action: Action
    memory: Memory | None = None
    target: str | None = None
    reason: str = ""


class Store(Protocol):
    """The user's entries as a policy sees them while planning one operation."""

    @property
    def update_enabled(self) -> bool: ...

    @property
    def add_enabled(self) -> bool: ...

    def get(self, entry_id: str) -> Entry | None:
        """The active entry with this id, or None."""
        ...

    def same(self, memory: Memory) -> Entry | None:
        """The active entry with ``memory``'s canonical id (an exact duplicate), or None."""
        ...

    def candidates(self, memory: Memory) -> list[SearchHit] | None:
        """At most 3 similar active entries with cosine scores; None when the search failed."""
        ...


def union(a: Sequence[str], b: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*a, *b]))
