"""memcluster's Serve app on the session Ray cluster, for the tests that need the real cluster path
(Serve ingress → shard actors): deploy under a route prefix, wait for ``/readyz``, and on exit delete
the app and kill its detached shard actors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from cluster import deploy


def wait_ready(base: str, timeout: float = 120.0) -> dict[str, Any]:
    """``/readyz``'s body once it is ready (:func:`cluster.deploy.wait_ready`); fails the test after ``timeout``."""
    ready = deploy.wait_ready(base, timeout, interval=0.5)
    assert ready is not None, f"{base} not ready after {timeout} s: {deploy.readyz(base)}"
    return ready


@contextmanager
def serve_memcluster(serve_port: int, name: str, prefix: str, settings: dict[str, Any]) -> Iterator[str]:
    """Deploy the app ``name`` at ``prefix`` with ``settings`` (``shards`` and ``namespace`` required);
    yields its base URL."""
    import ray
    from ray import serve

    from actors.router import actor_name
    from serve_apps.builder import build_app

    serve.run(build_app({"settings": settings}), name=name, route_prefix=prefix)
    base = f"http://127.0.0.1:{serve_port}{prefix}"
    try:
        wait_ready(base)
        yield base
    finally:
        serve.delete(name)
        for k in range(int(settings["shards"])):
            ray.kill(ray.get_actor(actor_name(k), namespace=settings["namespace"]))


@contextmanager
def keyed_memcluster(serve_port: int, data_dir: Path, app: str, tag: str) -> Iterator[dict[str, str]]:
    """memcluster on the session's Serve for one app with an API key (2 shards, hashing embedder), at
    ``/<tag>`` in namespace ``memcluster-<tag>-test``; yields ``{"base": url, "key": api key}``."""
    key = f"{app}-key-0123456789"
    settings = {"data_dir": str(data_dir), "shards": 2, "namespace": f"memcluster-{tag}-test",
                "embedder": {"kind": "hashing", "dim": 256}, "api_keys": {app: key}}
    with serve_memcluster(serve_port, f"mem{tag}", f"/{tag}", settings) as base:
        yield {"base": base, "key": key}
