"""``max_tokens`` over real HTTP (uvicorn + LocalShardBackend), through memclient and raw requests: search,
preload and ``memory_search`` stay within the budget, a cut window carries exactly its returned turns'
provenance, a budget below the smallest block is 422 naming ``max_tokens``, and an app's default budget
(``memory.apps.<app>.max_tokens``) applies when a call names none."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from memclient import MemoryClient
from memclient.errors import InvalidRequest
from memcore import budget, preload
from memcore.extraction.events import Event
from memcore.extraction.verbatim import VerbatimExtractor
from tests.serve_apps.conftest import Served

T0 = datetime(2023, 7, 1, 9, 0, tzinfo=UTC)
TEXTS = ["I adopted a beagle puppy", "What is the puppy called?", "His name is Biscuit",
         "Biscuit is a lovely name", "He chews my shoes", "Puppies love shoes",
         "Unrelated: I bought a new laptop", "Which one?", "A small one for travel"]
QUERY = "beagle puppy Biscuit chews"
count = budget.whitespace_count


@pytest.fixture
def served(make_server: Callable[..., Served]) -> Any:
    served = make_server(memory={"apps": {"tight-app": {"max_tokens": 12}}})
    events = [Event(id=f"t{i}", role="user" if i % 2 == 0 else "assistant", timestamp=T0 + timedelta(minutes=i),
                    content=text) for i, text in enumerate(TEXTS)]
    mems = [op.memory for op in VerbatimExtractor("window", window=1).extract(events).operations if op.memory]
    with MemoryClient(served.url) as mc:
        for app in ("app", "tight-app"):
            for m in mems:
                assert m is not None
                mc.add(app, "alice", m.text, kind="episode", event_time=m.event_time, provenance=m.provenance)
    return served


def test_search_over_http_fits_the_budget_and_says_what_was_cut(served: Served) -> None:
    with MemoryClient(served.url) as mc:
        whole = mc.search("app", "alice", QUERY)
        assert whole[0].merged and not whole[0].cut
        lines = dict(zip(whole[0].entry.provenance, whole[0].entry.text.split("\n"), strict=True))
        for max_tokens in (3, 12, 25, 1000):
            hits = mc.search("app", "alice", QUERY, max_tokens=max_tokens)
            assert sum(count(h.entry.text) for h in hits) <= max_tokens
            assert [h.entry.id for h in hits] == [h.entry.id for h in whole[: len(hits)]]
        (top,) = mc.search("app", "alice", QUERY, max_tokens=12)
        assert top.cut and sorted(top.entry.provenance + list(top.cut)) == sorted(whole[0].entry.provenance)
        assert top.entry.text.split("\n") == [lines[t] for t in top.entry.provenance]
        with pytest.raises(InvalidRequest) as exc:
            mc.search("app", "alice", QUERY, max_tokens=0)
        assert exc.value.status == 422 and exc.value.field == "max_tokens"
        # The app's default budget applies when the call names none; a call's own budget wins.
        (tight,) = mc.search("tight-app", "alice", QUERY)
        assert tight.cut and count(tight.entry.text) <= 12
        assert sum(count(h.entry.text) for h in mc.search("tight-app", "alice", QUERY, max_tokens=1000)) > 12


def test_preload_over_http_renders_within_the_budget(served: Served) -> None:
    floor = preload.min_tokens(None)
    with MemoryClient(served.url) as mc:
        for max_tokens in (floor, floor + 10, floor + 40):
            result = mc.preload("app", "alice", 3, "Tell me about the beagle puppy", max_tokens=max_tokens)
            assert count(result.text) <= max_tokens and result.strategy == "search"
        cut = mc.preload("app", "alice", 3, "Tell me about the beagle puppy", max_tokens=floor + 12)
        assert cut.text and cut.cut
        for e in cut.entries:
            if e.id in cut.cut:
                assert len(e.text.split("\n")) == len(e.provenance) and not set(e.provenance) & set(cut.cut[e.id])
        with pytest.raises(InvalidRequest) as exc:
            mc.preload("app", "alice", 3, "puppy", max_tokens=floor - 1)
        assert exc.value.status == 422 and exc.value.field == "max_tokens"
        # A playbook of its own moves the floor: the whole block, playbook included, fits.
        long_playbook = " ".join(["note"] * 50)
        with pytest.raises(InvalidRequest):
            mc.preload("app", "alice", 3, "puppy", playbook=long_playbook, max_tokens=floor)
        ok = mc.preload("app", "alice", 3, "puppy", playbook=long_playbook, max_tokens=80)
        assert count(ok.text) <= 80
        assert count(mc.preload("tight-app", "alice", 3, "beagle puppy", max_tokens=floor + 5).text) <= floor + 5
    with httpx.Client(base_url=served.url) as c:
        r = c.post("/v1/apps/tight-app/users/alice/preload", json={"budget": 3, "message": "puppy"})
        assert r.status_code == 422 and r.json()["field"] == "max_tokens"  # the app's 12 is below the frame


def test_memory_search_tool_takes_max_tokens(served: Served) -> None:
    with MemoryClient(served.url) as mc:
        schema = next(t for t in mc.tools("app") if t["function"]["name"] == "memory_search")
        assert "max_tokens" in schema["function"]["parameters"]["properties"]
        out = mc.call_tool("app", "alice", "memory_search", {"query": QUERY, "max_tokens": 12})
        assert out["count"] == 1 and count(out["results"][0]["memory"]) <= 12 and out["results"][0]["cut_turns"]
        big = mc.call_tool("app", "alice", "memory_search", {"query": QUERY})
        assert sum(count(r["memory"]) for r in big["results"]) > 12
        tight = mc.call_tool("tight-app", "alice", "memory_search", {"query": QUERY})
        assert sum(count(r["memory"]) for r in tight["results"]) <= 12
        with pytest.raises(InvalidRequest) as exc:
            mc.call_tool("app", "alice", "memory_search", {"query": QUERY, "max_tokens": 0})
        assert exc.value.field == "arguments.max_tokens"
