"""The LangGraph graph of tests/integrations/test_langgraph_graph.py on the Ray cluster (Serve ingress,
shard actors, API key): session 1 stores a fact through MemclusterStore, session 2 (a new thread) gets
it back, a second user sees nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integrations.test_langgraph_graph import two_sessions

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_memcluster(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.serve_apps.ray_app import keyed_memcluster

    with keyed_memcluster(serve_port, tmp_path_factory.mktemp("lg-ray"), "lg-graph", "lg") as served:
        yield served


def test_two_sessions_on_the_ray_cluster(ray_memcluster: dict[str, str]) -> None:
    two_sessions(ray_memcluster["base"], ray_memcluster["key"])
