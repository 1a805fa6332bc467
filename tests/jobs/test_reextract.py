from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.backfill import BackfillOptions, Source, run_backfill
from jobs.reextract import ReextractOptions, generations, run_drop, run_reextract
from tests.jobs.conftest import session_row, write_jsonl
from tests.jobs.test_backfill import ARCHIVE

pytestmark = pytest.mark.ray

OTHER = session_row("crm", "zed", "z1", [("user", "Zed keeps bees in the garden")])


def backfilled(make_cluster: Any, tmp_path: Path, **overrides: Any) -> Any:
    cluster = make_cluster(**overrides)
    path = write_jsonl(tmp_path / "archive.jsonl", [*ARCHIVE, OTHER])
    options = BackfillOptions(progress_s=0, granularity="turn")  # one entry per turn (the default is windows)
    assert run_backfill(cluster.settings, Source(paths=[str(path)]), options, log=print).ok
    return cluster


def ids(entries: list[Any]) -> frozenset[str]:
    return frozenset(e.id for e in entries)


def test_reextract_switches_generations_atomically_then_drops_the_old(make_cluster: Any, tmp_path: Path) -> None:
    cluster = backfilled(make_cluster, tmp_path)
    old = ids(cluster.read("shop", "ann"))
    zed = ids(cluster.read("crm", "zed"))
    assert len(old) == 4
    seen_read: list[frozenset[str]] = []
    seen_search: list[frozenset[str]] = []
    stop = threading.Event()

    def poll() -> None:
        while not stop.is_set():
            seen_read.append(ids(cluster.read("shop", "ann")))
            seen_search.append(frozenset(h.entry.id for h in cluster.search("shop", "ann", "Biscuit shoes beagle")))

    reader = threading.Thread(target=poll)
    reader.start()
    try:
        cfg = cluster.settings.extractor.model_copy(update={"granularity": "session"})
        summary = run_reextract(cluster.settings, ReextractOptions(apps=["shop"], extractor=cfg, progress_s=0.2),
                                log=print)
        time.sleep(0.5)
    finally:
        stop.set()
        reader.join(30)
    assert summary.ok, summary.error
    assert summary.generation == 2 and summary.users == 2 and summary.counts["sessions"] == 3
    new = ids(cluster.read("shop", "ann"))
    assert len(new) == 2 and not new & old
    assert {frozenset(s) for s in seen_read} <= {old, new} and old in seen_read and new in seen_read
    assert all(s <= old or s <= new for s in seen_search) and any(s and s <= new for s in seen_search)
    assert ids(cluster.read("crm", "zed")) == zed  # not re-extracted: carried over as it was
    hit = cluster.search("shop", "ann", "running shoes")[0].entry
    assert hit.provenance == ["s2/s2-0", "s2/s2-1"] and hit.text.startswith("User: Biscuit chewed")

    infos = generations(cluster.settings)
    assert {(i["current"], tuple(i["generations"])) for i in infos} == {(2, (1, 2))}
    with pytest.raises(ValueError):
        run_drop(cluster.settings, 2)
    run_drop(cluster.settings, 1)
    assert {tuple(i["generations"]) for i in generations(cluster.settings)} == {(2,)}

    handle = cluster.handle("shop", "ann")  # a restarted shard reopens the generation the pointer names
    cluster.ray.kill(handle, no_restart=False)
    deadline = time.monotonic() + 60
    while True:
        try:
            assert ids(cluster.read("shop", "ann")) == new
            break
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_failing_reextract_leaves_reads_on_the_old_generation(make_cluster: Any, tmp_path: Path,
                                                                 scripted_llm: Any) -> None:
    cluster = backfilled(make_cluster, tmp_path)
    before = {u: ids(cluster.read(a, u)) for a, u in (("shop", "ann"), ("shop", "bob"), ("crm", "zed"))}
    cfg = cluster.settings.extractor.model_copy(update={"base_url": scripted_llm.base_url, "model": "scripted"})
    summary = run_reextract(cluster.settings, ReextractOptions(extractor=cfg, progress_s=0), log=print)
    assert not summary.switched and summary.error and "HTTP 500" in summary.error
    assert scripted_llm.requests  # the endpoint was called and failed
    after = {u: ids(cluster.read(a, u)) for a, u in (("shop", "ann"), ("shop", "bob"), ("crm", "zed"))}
    assert after == before
    assert {(i["current"], tuple(i["generations"]), i["staging"]) for i in generations(cluster.settings)} == {
        (1, (1,), None)}
