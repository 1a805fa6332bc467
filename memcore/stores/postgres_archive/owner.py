"""Which users one shard's archive serves in a database every shard shares."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from memcore.ids import route_hash
from memcore.model import UserKey


@dataclass(frozen=True)
class Owner:
    """Shard ``shard`` of ``shards``: the users :func:`memcore.ids.shard_of` routes to it (``shards`` 1: all)."""

    shard: int = 0
    shards: int = 1

    def where(self, alias: str = "") -> str:
        """The SQL predicate of this shard's rows (on a table with a ``route`` column)."""
        column = f"{alias}.route" if alias else "route"
        return f"(mod({column}, {int(self.shards)}) = {int(self.shard)})"

    @staticmethod
    def route(key: UserKey) -> Decimal:
        """The ``route`` value stored with ``key``'s rows."""
        return Decimal(route_hash(key))
