"""The knowledge graph and the diary of a shard's users (:class:`memcore.knowledge.KnowledgeGraph` over the
shard's archive, :attr:`memcore.archive_ports.EventArchive.graph` / ``diary``): what :class:`actors.shard.ShardCore`'s
``graph_*`` and ``diary_*`` methods run. Writes run in the user's write turn (the shard calls them through
``_write``); reads beside them. An app whose memory is off has its writes refused and its reads empty
(:class:`memcore.app_policy.ResolvedPolicy`); every answer is JSON-ready (what the HTTP API sends)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from actors.context import ShardContext, ShardPart
from memcore.expiry import ExpiringDiary, ExpiringGraph, Expiry
from memcore.knowledge import KnowledgeGraph, diary_json, fact_json
from memcore.model import UserKey
from memcore.provenance import event_ref
from memcore.records import Turn


def graph_of(ctx: ShardContext) -> KnowledgeGraph:
    """The knowledge graph over the shard's archive; its reads leave out what the app's TTL expired
    (:class:`memcore.expiry.ExpiringGraph`), before the sweep deletes it."""
    expiry = Expiry(ctx.settings.ttl)
    return KnowledgeGraph(ExpiringGraph(ctx.archive.graph, expiry), ExpiringDiary(ctx.archive.diary, expiry))


def turn_refs(turns: Iterable[Turn]) -> set[str]:
    """The refs a fact may cite these turns by: qualified (``session/event``) and bare (the event id)."""
    return {r for t in turns for r in (event_ref(t.session, t.event_id), t.event_id)}


class ShardGraph(ShardPart):
    def __init__(self, ctx: ShardContext) -> None:
        super().__init__(ctx)
        self.kg = graph_of(ctx)

    def _writes(self, key: UserKey) -> None:
        self.settings.policy(key.app).check_writes()

    def _reads(self, key: UserKey) -> bool:
        return self.settings.policy(key.app).reads

    # -------------------------------------------------------------- writes
    def add(self, key: UserKey, fact: dict[str, Any], supersede: bool = False) -> dict[str, Any]:
        self._writes(key)
        now = self.kg.now()
        if supersede:
            current, closed, created = self.kg.supersede(key, fact)
        else:
            (current, created), closed = self.kg.add(key, fact), []
        return {"fact": fact_json(current, now), "created": created, "closed": [fact_json(c, now) for c in closed]}

    def invalidate(self, key: UserKey, ref: dict[str, Any]) -> dict[str, Any]:
        self._writes(key)
        now = self.kg.now()
        return {"closed": [fact_json(c, now) for c in self.kg.invalidate(key, ref)]}

    def declare(self, key: UserKey, entity: dict[str, Any]) -> dict[str, Any]:
        self._writes(key)
        return self.kg.declare(key, entity).model_dump(mode="json")

    def delete(self, key: UserKey, fact_id: str) -> dict[str, Any]:
        """Hard-delete one fact (every version; deletes always work)."""
        return {"fact_id": fact_id, "versions": self.kg.delete_fact(key, fact_id)}

    def write_diary(self, key: UserKey, entry: dict[str, Any]) -> dict[str, Any]:
        self._writes(key)
        return diary_json(self.kg.write_diary(key, entry))

    # --------------------------------------------------------------- reads
    def query(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        now = self.kg.now()
        facts = self.kg.query(key, query) if self._reads(key) else []
        ent = self.kg.entity(key, query["entity"]) if facts and query.get("entity") else None
        return {"facts": [fact_json(f, now, ent.key if ent else None) for f in facts], "count": len(facts)}

    def timeline(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        now = self.kg.now()
        facts = self.kg.query(key, {k: v for k, v in query.items() if k in ("entity", "known_at", "limit")}) \
            if self._reads(key) else []
        return {"timeline": [fact_json(f, now) for f in facts], "count": len(facts)}

    def neighbourhood(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        if not self._reads(key):
            return {"entity": query.get("entity"), "entities": [], "facts": []}
        return self.kg.neighbourhood(key, query)

    def entity(self, key: UserKey, name: str) -> dict[str, Any] | None:
        ent = self.kg.entity(key, name) if self._reads(key) else None
        return None if ent is None else ent.model_dump(mode="json")

    def read_diary(self, key: UserKey, query: dict[str, Any]) -> dict[str, Any]:
        entries, total = self.kg.read_diary(key, query) if self._reads(key) else ([], 0)
        return {"entries": [diary_json(e) for e in entries], "total": total, "showing": len(entries)}
