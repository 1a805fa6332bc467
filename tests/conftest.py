"""Fixtures shared by the whole suite: embedders and the one Ray session of the run."""

from __future__ import annotations

import itertools
import os
import random
import shutil
import socket
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(autouse=True)
def no_process_recorder() -> Iterator[None]:
    """Each test starts and ends with this process recording no metrics: a job run in the test process
    (the backfill job installs Ray's recorder in its driver) must not change how later tests' telemetry
    and event logs behave (its background thread defers their records)."""
    from memcore import telemetry

    telemetry.set_recorder(None)
    yield
    telemetry.set_recorder(None)


@pytest.fixture(scope="session")
def hashing_embedder():  # type: ignore[no-untyped-def]
    """A fast deterministic test double (the real default is MiniLM)."""
    from memcore.stores.embedders import HashingEmbedder

    return HashingEmbedder(dim=256)


@pytest.fixture(scope="session")
def minilm():  # type: ignore[no-untyped-def]
    from memcore.stores.embedders import MiniLMEmbedder

    return MiniLMEmbedder()


TEST_PORTS = range(20000, 32000)
"""Where :func:`free_port` looks: above Ray's worker ports (10002-19999) and below Linux's ephemeral range
(32768-60999), where every ``bind(0)`` lands, Ray's own port-zero GCS included. A port taken from the
ephemeral range can be handed to a port-zero GCS the moment the test releases it, and gRPC binds with
SO_REUSEPORT: two GCS servers then share the port and a client reaches the wrong cluster."""
PORTS_PER_WORKER = 2000
"""Each pytest-xdist worker draws from its own slice of :data:`TEST_PORTS` (``gw0`` the first one)."""
_next_port = itertools.count(random.randrange(PORTS_PER_WORKER))


def free_port() -> int:
    """A port free on every interface now, from this worker's slice of :data:`TEST_PORTS`; successive calls
    walk the slice, so a port handed out and not yet bound is not handed out again soon."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker[2:].isdigit() else 0
    base = TEST_PORTS.start + (index * PORTS_PER_WORKER) % len(TEST_PORTS)
    for _ in range(PORTS_PER_WORKER):
        port = base + next(_next_port) % PORTS_PER_WORKER
        with socket.socket() as s:
            try:
                s.bind(("", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {base}..{base + PORTS_PER_WORKER - 1}")


@pytest.fixture(scope="session")
def ray_session() -> Iterator[Any]:
    """One local Ray cluster for the whole run (per pytest-xdist worker), in a temp dir of its own so it
    never reads or writes ``/tmp/ray``, where other tests' clusters and their "current cluster" file live
    (loopback only when run inside ``unshare -n``)."""
    import ray

    temp_dir = tempfile.mkdtemp(prefix="rt-", dir="/tmp")  # short: Ray's socket paths live below it
    try:
        ray.init(
            address="local",  # a fresh cluster, never one a `ray start` elsewhere left running
            num_cpus=4,
            object_store_memory=400_000_000,
            include_dashboard=False,
            namespace="memcluster-test",
            logging_level="WARNING",
            log_to_driver=False,
            _temp_dir=temp_dir,
        )
        yield ray
    finally:
        try:
            from ray import serve

            serve.shutdown()
        finally:
            ray.shutdown()
            shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def ray_first(request: pytest.FixtureRequest) -> None:
    """Under pytest-xdist, start the worker's Ray session before its first test, as a run in one process
    does (its first module needs it): later modules start and stop whole memctl clusters (token auth, their
    own ports) in the worker's network namespace, and the session's Ray starts next to none of them."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        request.getfixturevalue("ray_session")


@pytest.fixture(scope="session")
def serve_port(ray_session: Any) -> int:
    """Ray Serve's HTTP proxy on 127.0.0.1, started once for every Ray module (apps use their own prefixes)."""
    from ray import serve

    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    return port


@pytest.fixture
def scripted_llm() -> Iterator[Any]:
    """A started scripted OpenAI-compatible server (:mod:`testkit.scripted_llm`); ``push`` script items."""
    from testkit.scripted_llm import ScriptedLLM

    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[Any]:
    """A private PostgreSQL 15 server on 127.0.0.1 for the whole run (per pytest-xdist worker), in a temp dir
    (:mod:`testkit.postgres`); a test gets a database schema of its own from :func:`pg_schema`."""
    from testkit import postgres

    if not postgres.available():
        why = "PostgreSQL (initdb, pg_ctl, a postgres user, root) is not available; scripts/test installs it"
        if os.environ.get("MEMCLUSTER_TEST_REQUIRE_POSTGRES") == "1":  # scripts/test found it installed
            pytest.fail(why)
        pytest.skip(why)
    with postgres.PostgresServer(free_port()) as server:
        yield server


_schemas = itertools.count(1)


def pg_schema() -> str:
    """A schema name no other test of this process uses (an archive in it starts empty)."""
    return f"t{os.getpid()}_{next(_schemas)}"
