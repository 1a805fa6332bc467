"""The vendored LangGraph store suites run against one live memcluster per module: the HTTP app on
127.0.0.1 (LocalShardBackend) whose embedder is the suites' own ``CharacterEmbeddings(dims=500)``, so
the service ranks by the embedding the tests were written for; plus ``mocker.spy`` (the one pytest-mock call
the suites make) over :mod:`unittest.mock`. The table of expected failures is ``divergences.py``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integrations.langgraph_store_suite.divergences import XFAIL
from tests.integrations.langgraph_store_suite.embedder import CharacterEmbedder
from tests.integrations.langgraph_store_suite.live import LiveStore
from tests.integrations.langgraph_store_suite.mocking import Mocker
from tests.serve_apps.conftest import serve_local


@pytest.fixture(scope="module")
def service_embedder() -> CharacterEmbedder:
    """The embedder of the module's memcluster (its character projections are drawn as it meets them)."""
    return CharacterEmbedder()


@pytest.fixture(scope="module", autouse=True)
def live_memcluster(tmp_path_factory: pytest.TempPathFactory, service_embedder: CharacterEmbedder) -> Iterator[str]:
    with serve_local(tmp_path_factory.mktemp("langgraph-suite"), service_embedder) as served:
        LiveStore.url = served.url
        try:
            yield served.url
        finally:
            for store in LiveStore.opened:
                store.close()
            LiveStore.opened.clear()
            LiveStore.url = ""


@pytest.fixture
def mocker() -> Iterator[Mocker]:
    m = Mocker()
    yield m
    m.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark the tests of :data:`~tests.integrations.langgraph_store_suite.divergences.XFAIL` (by file and
    function, every parameter set) as strict expected failures with their reason."""
    here = Path(__file__).parent
    for item in items:
        if item.path.parent != here:
            continue
        file = item.path.name
        name = "::".join(part for part in item.nodeid.split("::")[1:])
        reason = XFAIL.get(f"{file}::{name.split('[')[0]}")
        if reason is not None:
            item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
