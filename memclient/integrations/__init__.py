"""Agent-framework adapters over memclient, each behind its own extra of ``memcluster-client``:

- :mod:`memclient.integrations.trpc` (``[trpc]``): ``MemclusterMemoryService`` for trpc-agent-py and the
  ``search_memory`` / ``save_memory`` tools;
- :mod:`memclient.integrations.langgraph` (``[langgraph]``): ``MemclusterStore``, a LangGraph ``BaseStore``;
- :mod:`memclient.integrations.openai_agents` (``[openai-agents]``): ``MemclusterSession``,
  ``memory_tools`` and ``with_memory`` for the OpenAI Agents SDK.

Importing one without its framework raises an :class:`ImportError` naming the extra to install.
"""

from __future__ import annotations

from memclient.integrations.extras import require

__all__ = ["require"]
