"""Agent-framework adapters over memclient, each behind its own extra of ``memcluster-client``:

- :mod:`memclient.integrations.trpc` (``[trpc]``): ``MemclusterMemoryService`` for trpc-agent-py and the
  ``search_memory`` / ``save_memory`` tools;
- :mod:`memclient.integrations.langgraph` (``[langgraph]``): ``MemclusterStore``, a LangGraph ``BaseStore``;
- :mod:`memclient.integrations.openai_agents` (``[openai-agents]``): ``MemclusterSession``,
  ``memory_tools`` and ``with_memory`` for the OpenAI Agents SDK;
- :mod:`memclient.integrations.mcp` (``[mcp]``): ``memcluster-mcp``, a stdio MCP server for desktop
  clients bridged to the service's ``/mcp``.

Importing one without its framework raises an :class:`ImportError` naming the extra to install (``mcp``
imports without it; its ``main`` says which extra is missing).
"""

from __future__ import annotations

from memclient.integrations.extras import require

__all__ = ["require"]
