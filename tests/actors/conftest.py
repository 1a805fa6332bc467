"""Fixtures of the actor tests: a shard core on temp dirs (real engines, the hashing embedder)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from actors.shard import ShardCore
from memcore.records import JobRecord
from memcore.settings import Settings

MakeCore = Callable[..., ShardCore]


@pytest.fixture
def make_core(tmp_path: Path, hashing_embedder: Any) -> Iterator[MakeCore]:
    """``make_core(start_workers=True, extractor_obj=None, data=..., **extractor_settings)``."""
    with ExitStack() as stack:

        def make(*, start_workers: bool = True, extractor_obj: Any = None, data: Path | None = None,
                 settings: dict[str, Any] | None = None, **extractor: Any) -> ShardCore:
            s = Settings(data_dir=data or tmp_path, shards=1, embedder={"kind": "hashing", "dim": 256},
                         extractor=extractor, **(settings or {}))
            core = ShardCore(s, 0, hashing_embedder, extractor=extractor_obj, start_workers=start_workers)
            stack.callback(core.close)
            return core

        yield make


def done(core: ShardCore, job: JobRecord, timeout: float = 30.0) -> JobRecord:
    final = core.jobs.wait(job.job_id, timeout)
    assert final.finished, final
    return final



