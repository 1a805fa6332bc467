"""The tool routes: the OpenAI function schemas an app exposes, and running one tool call.

::

    GET  /v1/apps/{app}/tools?mode=                       the schemas of the app's exposed tools
    POST /v1/apps/{app}/users/{user}/tools/{name}         run a tool (403 when the app does not expose it)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Path, Query, Request, Response
from fastapi.responses import JSONResponse

from memcore.app_policy import ToolMode
from memcore.errors import NotFoundError
from memcore.tools import openai_schema
from memcore.validation import make_key
from memcore.vocabulary import AGENT_TOOLS
from serve_apps.deps import App, User, errors, seq_headers, shards, state, to_json
from serve_apps.http.access import USER_PREFIX, scoped_router
from serve_apps.http.models import ToolCallRequest, ToolList

router = scoped_router()


@router.get("/v1/apps/{app}/tools", response_model=ToolList, responses=errors(), summary="List tools",
            tags=["tools"])
async def list_tools(
    request: Request, app: App,
    mode: Annotated[ToolMode | None, Query(description="Optional: the app's mode is a deployment setting "
                                                       "(agentic: the agent manages memory; auto: an extractor "
                                                       "does, the agent only searches); another one is 403.")]
    = None,
) -> Response:
    """The OpenAI function schemas of exactly the tools the app exposes to agents, in its mode."""
    make_key(app, "tools")  # validates the app id (422 naming `app`)
    _, settings = state(request)
    policy = settings.policy(app)
    policy.check_mode(mode)
    return JSONResponse({"tools": [openai_schema(n) for n in policy.exposed_tools()],
                         "mode": policy.tool_mode.value, "memory": policy.memory})


@router.post(USER_PREFIX + "/tools/{name}", response_model=dict[str, Any], responses=errors(404),
             summary="Run a tool", tags=["tools"])
async def run_tool(
    request: Request, app: App, user: User,
    name: Annotated[str, Path(description="One of " + ", ".join(AGENT_TOOLS) + ".")],
    call: ToolCallRequest,
) -> Response:
    """Execute a tool call for the user and return its JSON result. A tool the app does not expose to
    agents in its mode is 403, and so is a ``mode`` other than the app's."""
    key = make_key(app, user)
    if name not in AGENT_TOOLS:
        raise NotFoundError(f"unknown tool {name!r}; known: {', '.join(AGENT_TOOLS)}", field="name")
    result, seq = await shards(request).tool(key, name, dict(call.arguments), call.mode)
    return JSONResponse(to_json(result), headers=seq_headers(seq))


