"""The Agents SDK Runner scenario of tests/integrations/test_openai_agents.py on the Ray cluster (Serve
ingress, shard actors, an API key): session 1 stores a fact, session 2 (new) gets it back, a second
user sees nothing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integrations.test_openai_agents import two_sessions

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def ray_memcluster(serve_port: int, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    from tests.serve_apps.ray_app import keyed_memcluster

    with keyed_memcluster(serve_port, tmp_path_factory.mktemp("oa-ray"), "oa-app", "oa") as served:
        yield served


async def test_two_sessions_on_the_ray_cluster(ray_memcluster: dict[str, str]) -> None:
    await two_sessions(ray_memcluster["base"], ray_memcluster["key"])
