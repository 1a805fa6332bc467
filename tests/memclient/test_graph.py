"""memclient's knowledge-graph and diary methods (sync and async) against the live app (uvicorn +
LocalShardBackend): the server's JSON comes back, errors raise naming the field, search keeps ``facts``."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from memclient import AsyncMemoryClient, InvalidRequest, MemoryClient, SearchResults
from tests.serve_apps.conftest import Served, serve_local


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[Served]:
    with serve_local(Path(tmp_path_factory.mktemp("memclient-graph")), hashing_embedder, shards=1) as served:
        yield served


def test_sync_graph_and_diary(live: Served) -> None:
    with MemoryClient(live.url) as mc:
        added = mc.add_fact("app", "ann", "Ann", "lives in", "Paris", valid_from="2024-01-01", memories=["m1"])
        assert added["created"] is True and added["fact"]["predicate"] == "lives_in"
        moved = mc.add_fact("app", "ann", "Ann", "lives_in", "Lisbon", supersede=True)
        assert [c["object"] for c in moved["closed"]] == ["Paris"]
        assert [f["object"] for f in mc.facts("app", "ann", "ann", as_of="2024-06-01")["facts"]] == ["Paris"]
        assert mc.timeline("app", "ann", "Ann")["count"] == 2
        assert [e["entity"] for e in mc.neighbourhood("app", "ann", "Lisbon")["entities"]] == ["Lisbon", "Ann"]
        assert mc.put_entity("app", "ann", "Ann", type="person", aliases=["Annie"])["aliases"] == ["Annie"]
        ent = mc.entity("app", "ann", "annie")
        assert ent is not None and ent["name"] == "Ann" and mc.entity("app", "ann", "nobody") is None
        ended = mc.invalidate_fact("app", "ann", "Ann", "lives_in", "Lisbon", ended="2030-01-01")
        assert len(ended["closed"]) == 1
        line = mc.facts("app", "ann", "Ann", predicate="lives_in")["facts"][0]["fact_id"]
        assert mc.delete_fact("app", "ann", line)["versions"] >= 1
        mc.write_diary("app", "ann", "first note", agent="planner")
        mc.write_diary("app", "ann", "second note", agent="planner", topic="work")
        read = mc.read_diary("app", "ann", agent="planner", limit=1)
        assert read["total"] == 2 and [e["content"] for e in read["entries"]] == ["second note"]
        with pytest.raises(InvalidRequest) as exc:
            mc.add_fact("app", "ann", "Ann", "p", "o", valid_from="someday")
        assert exc.value.field == "valid_from"
        mc.add("app", "ann", "Ann likes the sea")
        hits = mc.search("app", "ann", "what does ann like", include_facts=True)
        assert isinstance(hits, SearchResults) and hits  # Paris deleted; Lisbon ends in 2030, current now
        assert [f["object"] for f in hits.facts] == ["Lisbon"]
        assert mc.search("app", "ann", "what does ann like").facts == []
        assert "<facts>" in mc.preload("app", "ann", 5, "Ann", include_facts=True).text


def test_async_graph_and_diary(live: Served) -> None:
    async def body() -> None:
        async with AsyncMemoryClient(live.url) as mc:
            await mc.add_fact("app", "bob", "Bob", "works_at", "Acme")
            got = await mc.facts("app", "bob", "bob", direction="outgoing")
            assert [f["object"] for f in got["facts"]] == ["Acme"]
            await mc.write_diary("app", "bob", "note")
            assert (await mc.read_diary("app", "bob"))["total"] == 1
            assert (await mc.facts("app", "bob", "nobody"))["facts"] == []

    asyncio.run(body())
