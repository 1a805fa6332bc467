"""The side-by-side bench (:mod:`bench.peers.run`) on one LoCoMo conversation, Mem0's side (real mem0ai, its
local Qdrant and the packaged all-MiniLM-L6-v2): scored like the retrieval bench, written as JSON, markdown
and a plot; without the overlay venv MemPalace's side is recorded as not run (it runs in
``test_peers_mempalace.py``). (memcluster's side is the HTTP path the cluster tests cover; the full run is the
bench's.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.harness.locomo import LOCOMO, load
from bench.peers.run import asked, main


def test_one_conversation_through_mem0(tmp_path: Path) -> None:
    out = tmp_path / "peers.json"
    assert main(["--limit", "1", "--peers", "mem0", "--workdir", str(tmp_path), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    side = res["sides"]["mem0"]
    questions = asked(load(LOCOMO, limit=1))
    assert res["questions"] == len(questions) and side["ingest"]["entries"] == sum(
        len(s.turns) for s in load(LOCOMO, limit=1)[0].sample.sessions)
    overall = side["overall"]
    assert overall["n"] == sum(qa.category in (1, 2, 3, 4) for _, qa in questions)
    assert 0.3 < overall["session_recall_any@5"] <= 1 and 0 < overall["turn_recall_all@10"] <= 1
    lo, hi = side["ci95"]["session_recall_any@5"]
    assert lo <= overall["session_recall_any@5"] <= hi
    assert side["search_ms"]["n"] == len(questions) and side["search_ms"]["p50"] > 0
    assert "mempalace" in res["not_run"]
    assert "| mem0 |" in out.with_suffix(".md").read_text() and out.with_suffix(".png").stat().st_size > 0


def test_mempalace_without_its_overlay_is_not_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.peers import run

    monkeypatch.setattr(run, "PEERS_VENV", tmp_path / ".venv-peers")
    out = tmp_path / "peers.json"
    assert main(["--limit", "1", "--peers", "mempalace", "--workdir", str(tmp_path), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["sides"] == {} and "scripts/peers-venv" in res["not_run"]["mempalace"]
    assert res["not_run"]["memcluster"] == res["not_run"]["mem0"] == "not in --peers"
    assert "not run: mempalace" in out.with_suffix(".md").read_text()
    with pytest.raises(SystemExit):
        main(["--limit", "1", "--peers", "mem0,nope", "--out", str(out)])
