from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from jobs import locomo
from jobs.backfill import BackfillOptions, Source, run_backfill

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "locomo" / "locomo10.json"
needs_data = pytest.mark.skipif(not DATA.exists(), reason="LoCoMo-10 is not in ../shared/data")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first conversation, cut to its first two sessions."""
    sample = json.loads(DATA.read_text())[0]
    conv = sample["conversation"]
    keep = {k: v for k, v in conv.items() if not k.startswith("session_") or k.split("_")[1] in ("1", "2")}
    path = tmp_path_factory.mktemp("locomo") / "tiny.json"
    path.write_text(json.dumps([{**sample, "conversation": keep}]))
    return path


@needs_data
def test_converter_maps_speakers_dia_ids_and_times(tiny: Path) -> None:
    rows = locomo.rows(tiny, app="bench")
    sample = json.loads(tiny.read_text())[0]
    conv = sample["conversation"]
    assert [r["session"] for r in rows] == ["session_1", "session_2"]
    first = rows[0]
    assert (first["app"], first["user"]) == ("bench", sample["sample_id"])
    assert first["names"] == {"user": conv["speaker_a"], "assistant": conv["speaker_b"]}
    turns = conv["session_1"]
    assert [e["id"] for e in first["events"]] == [t["dia_id"] for t in turns]
    assert [e["role"] for e in first["events"]] == ["user" if t["speaker"] == conv["speaker_a"] else "assistant"
                                                     for t in turns]
    assert first["events"][0]["timestamp"] == "2023-05-08T13:56:00+00:00"  # "1:56 pm on 8 May, 2023"
    assert first["events"][1]["timestamp"] == "2023-05-08T13:56:01+00:00"
    assert rows[1]["events"][0]["timestamp"] > first["events"][-1]["timestamp"]


@needs_data
def test_converter_agrees_with_the_benchmark_loader(tiny: Path) -> None:
    """The retrieval benchmark extracts in process exactly the events the backfill job archives."""
    from bench.harness.locomo import events, load
    from memcore.extraction.events import Event

    theirs = [(c.user, s.key, c.names, events(s)) for c in load(tiny) for s in c.sessions if s.turns]
    ours = [(r["user"], r["session"], r["names"], [Event.model_validate(e) for e in r["events"]])
            for r in locomo.rows(tiny)]
    assert ours == theirs and len(ours) == 2


@needs_data
@pytest.mark.ray
def test_locomo_backfill_provenance_is_dia_ids(make_cluster: Any, tiny: Path) -> None:
    cluster = make_cluster()
    rows = locomo.rows(tiny, app="locomo")
    summary = run_backfill(cluster.settings, Source(rows=rows, label=str(tiny)),
                           BackfillOptions(progress_s=0, granularity="turn"), log=print)
    n_turns = sum(len(r["events"]) for r in rows)
    assert summary.ok and summary.turns == n_turns and summary.entries == n_turns, summary.failures
    user = rows[0]["user"]
    speaker = rows[0]["names"]["user"]
    first = rows[0]["events"][0]
    hits = cluster.search("locomo", user, first["content"])
    assert hits[0].entry.provenance == [f"{rows[0]['session']}/{first['id']}"]
    assert hits[0].entry.text == f"{speaker}: {first['content']}"
