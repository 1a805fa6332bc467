"""Deploy memcluster on the session's Ray Serve for the protocol tests (MCP, Mem0): one app per module."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.serve_apps.ray_app import wait_ready


@contextmanager
def deployed(serve_port: int, data_dir: Path, *, name: str, prefix: str, keys: dict[str, str],
             **settings: Any) -> Iterator[str]:
    """memcluster (2 shards, hashing embedder, API keys) at ``http://127.0.0.1:<port><prefix>``."""
    import ray
    from ray import serve

    from actors.router import actor_name
    from serve_apps.builder import build_app

    namespace = f"memcluster-{name}"
    conf = {"data_dir": str(data_dir), "shards": 2, "namespace": namespace,
            "embedder": {"kind": "hashing", "dim": 256}, "api_keys": keys, **settings}
    serve.run(build_app({"settings": conf}), name=name, route_prefix=prefix)
    base = f"http://127.0.0.1:{serve_port}{prefix}"
    wait_ready(base)
    try:
        yield base
    finally:
        serve.delete(name)
        for k in range(2):
            ray.kill(ray.get_actor(actor_name(k), namespace=namespace))
