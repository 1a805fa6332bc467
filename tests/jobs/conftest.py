"""Fixtures of the job tests: a shard cluster (RayShardBackend actors, hashing embedder) per test."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from memcore.model import UserKey
from memcore.settings import Settings


class Cluster:
    """Shard actors of one test (own namespace and data dir) plus helpers to query them."""

    def __init__(self, settings: Settings) -> None:
        import ray

        from actors.router import RayShardBackend

        self.ray = ray
        self.settings = settings
        self.backend = RayShardBackend(settings)
        self.handles = self.backend.ensure_all()
        ray.get([h.ping.remote() for h in self.handles])

    def handle(self, app: str, user: str) -> Any:
        from memcore.ids import shard_of

        return self.handles[shard_of(UserKey(app=app, user=user), self.settings.shards)]

    def search(self, app: str, user: str, query: str, k: int = 10) -> list[Any]:
        key = UserKey(app=app, user=user)
        return self.ray.get(self.handle(app, user).search.remote(key, {"query": query, "max_results": k}))

    def read(self, app: str, user: str) -> list[Any]:
        key = UserKey(app=app, user=user)
        return self.ray.get(self.handle(app, user).read.remote(key))

    def count_all(self, include_deleted: bool = True) -> int:
        return sum(self.ray.get(h.status.remote())["entries"] for h in self.handles)

    def close(self) -> None:
        from jobs import common

        for h in self.handles:
            try:
                self.ray.get(h.close.remote(), timeout=60)
            except Exception:  # noqa: BLE001 - a test may have killed it; it goes anyway
                pass
            finally:
                self.ray.kill(h, no_restart=True)
        try:  # a job run in this namespace left its detached metrics actor: one per test namespace is a leak
            self.ray.kill(self.ray.get_actor(common.DATA_METRICS_ACTOR, namespace=self.settings.namespace))
        except ValueError:
            pass


@pytest.fixture
def make_cluster(ray_session: Any, tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    made: list[Cluster] = []

    def make(**overrides: Any) -> Cluster:
        data = {"data_dir": tmp_path / f"data-{len(made)}", "shards": 2, "namespace": f"jobs-{uuid.uuid4().hex[:8]}",
                "embedder": {"kind": "hashing", "dim": 64}, **overrides}
        cluster = Cluster(Settings.model_validate(data))
        made.append(cluster)
        return cluster

    yield make
    for c in made:
        c.close()


def session_row(app: str, user: str, session: str, turns: list[tuple[str, str]], *, day: int = 1,
                prefix: str = "") -> dict[str, Any]:
    """An archive row: ``turns`` as (role, content), one minute apart on 2024-03-<day>."""
    return {"app": app, "user": user, "session": session, "events": [
        {"id": f"{prefix or session}-{i}", "role": role, "content": content,
         "timestamp": f"2024-03-{day:02d}T10:{i:02d}:00Z"} for i, (role, content) in enumerate(turns)]}


def write_jsonl(path: Path, rows: list[Any]) -> Path:
    with path.open("w") as fh:
        for r in rows:
            fh.write((r if isinstance(r, str) else json.dumps(r)) + "\n")
    return path
