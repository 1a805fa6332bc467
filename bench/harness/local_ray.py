"""The benchmarks' one way to start Ray, and the Serve app over it.

:func:`start_ray` starts a local Ray (``address="local"``: nothing but this machine; run the benchmarks
inside ``unshare -n``) unless this process is already connected to one. :func:`start_serve` adds the
environment ``memctl up`` gives Ray's processes, Serve on 127.0.0.1 and the memcluster app, then waits
for ``/readyz`` with ``memctl up``'s own readiness probe (:func:`cluster.deploy.wait_ready`).
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

READY_TIMEOUT_S = 300.0


def start_ray(*, num_cpus: int, object_store_memory: int | None = None, namespace: str | None = None,
              settings: Any = None, driver_priority: bool = False) -> bool:
    """Start a local Ray unless this process is connected to one; True when this call started it (the
    caller shuts it down).

    ``settings``: Ray's processes get the environment ``memctl up`` gives them for these settings
    (:func:`cluster.deploy.process_env`). ``driver_priority``: Ray's workers run at the driver's
    priority (``RAY_worker_niceness=0``) instead of Ray's nice 15, at which they lose the CPU to any
    other work on a shared machine.
    """
    import ray

    from cluster.deploy import process_env

    if ray.is_initialized():
        return False
    if driver_priority:
        os.environ.setdefault("RAY_worker_niceness", "0")
    with process_env(settings) if settings is not None else contextlib.nullcontext():
        ray.init(address="local", num_cpus=num_cpus, object_store_memory=object_store_memory,
                 include_dashboard=False, logging_level=logging.ERROR, log_to_driver=False, namespace=namespace)
    return True


def start_serve(settings: Any, port: int, *, num_cpus: int = 4, object_store_memory: int | None = None,
                timeout_s: float = READY_TIMEOUT_S) -> str:
    """Start Ray (:func:`start_ray` with ``settings``), Serve on 127.0.0.1:``port`` and the memcluster app of
    ``settings``; returns the base URL once ``/readyz`` answers ready (RuntimeError after ``timeout_s``)."""
    from ray import serve

    from cluster.deploy import wait_ready
    from memcore.settings import to_plain
    from serve_apps.builder import build_app

    start_ray(num_cpus=num_cpus, object_store_memory=object_store_memory, namespace=settings.namespace,
              settings=settings)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    serve.run(build_app({"settings": to_plain(settings)}), name="memcluster", route_prefix="/")
    base = f"http://127.0.0.1:{port}"
    if not wait_ready(base, timeout_s):
        raise RuntimeError(f"the Serve app did not become ready within {timeout_s:g} s")
    return base


def stop_serve() -> None:
    """Shut Serve and Ray down."""
    import ray
    from ray import serve

    try:
        serve.shutdown()
    finally:
        ray.shutdown()
