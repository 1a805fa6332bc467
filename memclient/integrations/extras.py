"""The one place that knows which extra of ``memcluster-client`` brings which framework."""

from __future__ import annotations

import importlib
from types import ModuleType

DISTRIBUTION = "memcluster-client"
#: extra name -> the framework module each integration needs
EXTRAS: dict[str, str] = {"trpc": "trpc_agent_sdk", "langgraph": "langgraph", "openai-agents": "agents",
                          "mcp": "mcp_types"}  # mcp 2.x (its types are a distribution of their own)


def require(extra: str) -> ModuleType:
    """Import the framework of ``extra``; an ImportError naming ``pip install "memcluster-client[extra]"``
    when it is missing (or broken in this environment)."""
    module = EXTRAS[extra]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"memclient.integrations needs the {extra!r} extra: pip install \"{DISTRIBUTION}[{extra}]\" "
            f"({module} could not be imported: {exc})"
        ) from exc
