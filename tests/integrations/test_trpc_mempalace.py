"""trpc-agent-py's MemPalace diary and knowledge-graph tools on memcluster (memclient.integrations.trpc_mempalace):
the same class names, tool names and argument shapes as seed 002's ``trpc_agent_sdk.tools.mempalace_tool``
(read from its source: the module itself needs the mempalace package), run against a live server, the user
and agent taken from the invocation context. Runs in the scripts/trpc-venv overlay (like test_trpc)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

trpc = pytest.importorskip("trpc_agent_sdk", reason="trpc-agent-py lives in the scripts/trpc-venv overlay (mcp<2)")

from trpc_agent_sdk.agents import LlmAgent  # noqa: E402
from trpc_agent_sdk.context import AgentContext, InvocationContext  # noqa: E402
from trpc_agent_sdk.models import OpenAIModel  # noqa: E402
from trpc_agent_sdk.sessions import InMemorySessionService  # noqa: E402

import memclient.integrations.trpc_mempalace as mp  # noqa: E402
from memclient import AsyncMemoryClient  # noqa: E402
from tests.integrations.server_process import server_process, server_python  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SEED_TOOLS = Path(trpc.__file__).parent / "tools" / "mempalace_tool.py"
GRAPH_CLASSES = ("MempalaceDiaryWriteTool", "MempalaceDiaryReadTool", "MempalaceKGAddTool", "MempalaceKGQueryTool",
                 "MempalaceKGInvalidateTool", "MempalaceKGTimelineTool")


def seed_declarations() -> dict[str, tuple[str, list[str], list[str]]]:
    """Class name → (tool name, property names, required) of seed 002's MemPalace tools, from their source."""
    out: dict[str, tuple[str, list[str], list[str]]] = {}
    for cls in ast.parse(SEED_TOOLS.read_text()).body:
        if not isinstance(cls, ast.ClassDef) or cls.name not in GRAPH_CLASSES:
            continue
        name = next(kw.value.value for node in ast.walk(cls) if isinstance(node, ast.Call)
                    for kw in node.keywords if kw.arg == "name" and isinstance(kw.value, ast.Constant))
        props: list[str] = []
        required: list[str] = []
        for node in ast.walk(cls):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if kw.arg == "properties" and isinstance(kw.value, ast.Dict):
                        props = [k.value for k in kw.value.keys if isinstance(k, ast.Constant)]
                    if kw.arg == "required" and isinstance(kw.value, ast.List):
                        required = [e.value for e in kw.value.elts if isinstance(e, ast.Constant)]
        out[cls.name] = (name, props, required)
    return out


def test_same_classes_names_and_argument_shapes_as_seed_002() -> None:
    from memcore.vocabulary import MEMPALACE_NAMES

    seed = seed_declarations()
    assert sorted(seed) == sorted(GRAPH_CLASSES)
    assert mp.MEMPALACE_TOOLS == dict(MEMPALACE_NAMES)
    client = AsyncMemoryClient("http://127.0.0.1:9")
    for cls_name, (name, props, required) in seed.items():
        tool = getattr(mp, cls_name)(client)
        decl = tool._get_declaration()
        assert tool.name == name and decl is not None and decl.parameters is not None
        assert list(decl.parameters.properties or {}) == props, cls_name
        assert list(decl.parameters.required or []) == required, cls_name


@pytest.fixture(scope="module")
def memcluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with server_process(server_python(), tmp_path_factory.mktemp("trpc-mempalace"), ROOT) as url:
        yield url


async def test_the_tools_write_and_read_the_users_graph_and_diary(memcluster: str) -> None:
    sessions = InMemorySessionService()
    agent = LlmAgent(name="planner", model=OpenAIModel(model_name="m", base_url="http://127.0.0.1:9", api_key="x"))

    async def context(user: str) -> InvocationContext:
        session = await sessions.create_session(app_name="trpc-kg", user_id=user, session_id=f"s-{user}")
        return InvocationContext(session_service=sessions, invocation_id="inv", agent=agent, session=session,
                                 agent_context=AgentContext())

    async with AsyncMemoryClient(memcluster) as mc:
        alice = await context("alice")

        async def run(cls: type[Any], **args: Any) -> dict[str, Any]:
            return await cls(mc).run_async(tool_context=alice, args=args)

        added = await run(mp.MempalaceKGAddTool, subject="Alice", predicate="likes", object="Italian food",
                          valid_from="2024-01-01")
        assert added["success"] is True and added["fact"] == "Alice -> likes -> Italian food"
        got = await run(mp.MempalaceKGQueryTool, entity="alice", direction="outgoing")
        assert got["count"] == 1 and got["facts"][0]["object"] == "Italian food" and got["facts"][0]["current"]
        ended = await run(mp.MempalaceKGInvalidateTool, subject="Alice", predicate="likes", object="Italian food",
                          ended="2024-06-01")
        assert ended["success"] is True and ended["invalidated"] == 1
        assert (await run(mp.MempalaceKGQueryTool, entity="Alice", as_of="2024-07-01"))["count"] == 0
        line = await run(mp.MempalaceKGTimelineTool, entity="Alice")
        assert [f["current"] for f in line["timeline"]] == [False]
        wrote = await run(mp.MempalaceDiaryWriteTool, entry="Planned the trip.", topic="travel")
        assert wrote["success"] is True and wrote["agent"] == "planner"
        read = await run(mp.MempalaceDiaryReadTool, last_n=5)
        assert read["agent"] == "planner" and [e["content"] for e in read["entries"]] == ["Planned the trip."]
        bad = await run(mp.MempalaceKGAddTool, subject="Alice", predicate="p", object="o", valid_from="soon")
        assert bad["success"] is False and "valid_from" in bad["error"]
        bob = await context("bob")
        empty = await mp.MempalaceKGQueryTool(mc).run_async(tool_context=bob, args={"entity": "Alice"})
        assert empty["count"] == 0
