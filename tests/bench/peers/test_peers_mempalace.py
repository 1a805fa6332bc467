"""MemPalace's side of the side-by-side bench (:mod:`bench.peers.mempalace`) on one LoCoMo conversation, through
the real mempalace 3.11 package, its chromadb and the all-MiniLM-L6-v2 ONNX files exported from the packaged
weights: filed, searched, scored and reported as ``python -m bench.peers --peers mempalace`` does it.

mempalace lives in the overlay environment only (its chromadb pins stay out of ``.venv``), so these tests run
there and skip in ``.venv``:

    scripts/peers-venv && .venv-peers/bin/python -m pytest tests/bench/peers/test_peers_mempalace.py
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("mempalace", reason="mempalace is only in the overlay: scripts/peers-venv, then run this file "
                                        "with .venv-peers/bin/python -m pytest")

from bench.harness.locomo import LOCOMO, load
from bench.peers import run as peers
from bench.peers.mempalace import MIN_COSINE, Drawer, same_embeddings
from bench.peers.run import asked, main


def test_one_conversation_through_mempalace(tmp_path: Path) -> None:
    assert (peers.PEERS_VENV / "bin" / "python").exists(), "run.py starts the side with .venv-peers' interpreter"
    out = tmp_path / "peers.json"
    assert main(["--limit", "1", "--peers", "mempalace", "--workdir", str(tmp_path), "--out", str(out)]) == 0
    res = json.loads(out.read_text())
    side = res["sides"]["mempalace"]
    conv = load(LOCOMO, limit=1)[0]
    questions = asked([conv])
    # one drawer per session, each cut by MemPalace into 800-character chunks
    ingest = side["ingest"]
    assert ingest["drawers"] == len(conv.sessions) and ingest["turns"] == sum(len(s.turns) for s in conv.sessions)
    text_chars = sum(len("\n".join(f"{conv.names[t.role]}: {t.text}" for t in s.turns)) for s in conv.sessions)
    assert ingest["entries"] >= text_chars // side["config"]["chunk_size"] > ingest["drawers"]
    # the embedder MemPalace searched with is sentence-transformers' all-MiniLM-L6-v2
    assert side["config"]["embedder_check_min_cosine"] > MIN_COSINE
    assert side["config"]["mempalace"] == "3.11.0" and side["config"]["chromadb"].startswith("1.5.")
    overall = side["overall"]
    assert res["questions"] == len(questions)
    assert overall["n"] == sum(qa.category in (1, 2, 3, 4) for _, qa in questions) and overall["results"] == 10
    assert 0.6 < overall["session_recall_any@5"] <= 1 and 0.4 < overall["turn_recall_all@10"] <= 1
    assert 600 < overall["tokens@10"] < 2000  # ten chunks of at most 800 characters, not ten whole sessions
    for key in ("session_recall_any@5", "turn_recall_all@10", "tokens@10"):
        lo, hi = side["ci95"][key]
        assert lo <= overall[key] <= hi
    assert side["search_ms"]["n"] == len(questions) and side["search_ms"]["p50"] > 0
    assert set(res["not_run"]) == {"memcluster", "mem0"}
    assert "| mempalace |" in out.with_suffix(".md").read_text() and out.with_suffix(".png").stat().st_size > 0
    # the palace, its config and chromadb's model cache stayed in the run's temp dir, which is gone
    assert not list(tmp_path.glob("bench-peers-*"))


def test_the_embedder_check_fails_loudly() -> None:
    rows = [[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]]
    assert same_embeddings(rows, [[2.0, 0.0, 0.0], [0.0, 0.6, 0.8]]) == pytest.approx(1.0)
    with pytest.raises(RuntimeError, match="least cosine"):
        same_embeddings(rows, [[1.0, 0.05, 0.0], [0.0, 0.6, 0.8]])
    with pytest.raises(RuntimeError, match="shapes differ"):
        same_embeddings(rows, rows[:1])


def test_a_chunk_maps_to_the_turns_whose_lines_it_holds() -> None:
    conv = load(LOCOMO, limit=1)[0]
    session = conv.sessions[0]
    drawer = Drawer.of(conv, session)
    ids = [t.id for t in session.turns]
    assert drawer.turns_in(drawer.text) == tuple(ids)
    first, second = (f"{conv.names[t.role]}: {t.text}" for t in session.turns[:2])
    assert drawer.text.startswith(f"{first}\n{second}\n")
    assert drawer.turns_in(first) == (ids[0],)
    assert drawer.turns_in(first[-5:] + "\n" + second[:3]) == (ids[0], ids[1])  # a cut through two lines
    assert drawer.turns_in(drawer.text[800:1600]) and ids[0] not in drawer.turns_in(drawer.text[800:1600])
    with pytest.raises(RuntimeError, match="not a piece"):
        drawer.turns_in("no such passage in this session")
