"""The benchmarks' one way to start the service: a local Ray with memctl's environment, the Serve
app of the given settings, and a wait until ``/readyz`` answers."""

from __future__ import annotations

import logging
import time
from typing import Any

READY_TIMEOUT_S = 300.0


def start_serve(settings: Any, port: int, *, num_cpus: int = 4, object_store_memory: int | None = None,
                timeout_s: float = READY_TIMEOUT_S) -> str:
    """Start Ray (the environment ``memctl up`` gives it), Serve on 127.0.0.1:``port`` and the memcluster
    app; returns the base URL once ``/readyz`` answers 200 (RuntimeError after ``timeout_s``)."""
    import httpx
    import ray
    from ray import serve

    from cluster.deploy import process_env
    from memcore.settings import to_plain
    from serve_apps.builder import build_app

    with process_env(settings):  # the Ray processes get the environment memctl gives them
        ray.init(address="local", num_cpus=num_cpus, object_store_memory=object_store_memory,
                 include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False,
                 namespace=settings.namespace)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app({"settings": to_plain(settings)}), name="memcluster", route_prefix="/")
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/readyz", timeout=5).status_code == 200:
                return base
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"the Serve app did not become ready within {timeout_s:g} s")


def stop_serve() -> None:
    """Shut Serve and Ray down."""
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()
