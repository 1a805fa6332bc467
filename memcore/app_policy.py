"""An app's memory policy: the tool modes and switches, what one app may do with memory, and the
resolved policy that answers every question the other parts ask of it (:meth:`memcore.settings.Settings.policy`
resolves it). A leaf of the domain like :mod:`memcore.settings`, which holds these as sections: it imports
only :mod:`memcore.vocabulary` and :mod:`memcore.errors`.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from memcore.errors import PermissionDeniedError, ValidationError
from memcore.vocabulary import (
    ADD,
    AGENT_TOOLS,
    DELETE,
    GRAPH_READ_TOOLS,
    LOAD,
    MAX_TOKENS_LIMIT,
    RECALL,
    SEARCH,
    UPDATE,
)


class ToolMode(StrEnum):
    AGENTIC = "agentic"
    AUTO = "auto"


_DEFAULT_ENABLED = {
    ToolMode.AGENTIC: {ADD, UPDATE, SEARCH, LOAD},
    ToolMode.AUTO: {ADD, UPDATE, DELETE, SEARCH},
}


class ToolPolicy(BaseModel):
    """Per-app tool switches: ``enabled`` overrides the mode defaults, ``auto_exposed`` adds
    enabled write tools to what Auto mode shows the agent.

    Agentic mode: add/update/search/load enabled, delete/clear disabled; every enabled tool exposed.
    Auto mode: the extractor may add/update/delete; search is enabled and exposed; load and clear
    are disabled; add/update/delete are enabled but hidden unless listed in ``auto_exposed``
    (enabled ≠ exposed). Load becomes exposed once enabled.
    The graph and diary tools (:data:`memcore.vocabulary.GRAPH_TOOLS`) are off in both modes until
    ``enabled`` turns them on; once on, Agentic mode exposes them all, Auto mode the reading ones
    (:data:`memcore.vocabulary.GRAPH_READ_TOOLS`) and those in ``auto_exposed``.
    """

    model_config = ConfigDict(extra="forbid")

    enabled: dict[str, bool] = Field(default_factory=dict)
    auto_exposed: list[str] = Field(default_factory=list)

    def enabled_tools(self, mode: ToolMode) -> set[str]:
        names = set(_DEFAULT_ENABLED[mode])
        for name, on in self.enabled.items():
            if name not in AGENT_TOOLS:
                raise ValidationError(f"unknown tool {name!r}", field="tools.enabled")
            (names.add if on else names.discard)(name)
        return names

    def exposed_tools(self, mode: ToolMode) -> list[str]:
        enabled = self.enabled_tools(mode)
        if mode is ToolMode.AGENTIC:
            shown = enabled
        else:
            shown = ({n for n in (SEARCH, LOAD, *GRAPH_READ_TOOLS) if n in enabled}
                     | {n for n in self.auto_exposed if n in enabled})
        return [n for n in AGENT_TOOLS if n in shown]


MemorySwitch = Literal["on", "archive_only", "off"]
ExtractorChoice = Literal["configured", "verbatim"]


class AppPolicy(BaseModel):
    """What one app may do with memory, decided by the deployment (never by the caller).

    - ``memory``: ``on``; ``archive_only`` (ingest archives the turns for recall, nothing is
      extracted); ``off`` (ingest answers ``skipped`` and stores nothing, reads answer empty, export
      included, writes are refused, imports and tool calls included; erasure still works).
    - ``extractor``: ``configured`` (the ``extractor`` section: the LLM when a model is configured,
      else verbatim) or ``verbatim`` (this app never sends its users' turns to a model).
    - ``tool_mode``: ``agentic`` or ``auto``; unset: ``auto`` when this app's extractor is an LLM,
      else ``agentic`` (the tRPC-Agent-Go memory service's rule).
    - ``tools``: the enabled/exposed switches (default: the top-level ``tools`` section). Agents see
      and run the exposed tools of the mode only; the extractor uses the enabled ones.
    """

    model_config = ConfigDict(extra="forbid")

    memory: MemorySwitch = "on"
    extractor: ExtractorChoice = "configured"
    tool_mode: ToolMode | None = None
    tools: ToolPolicy | None = None
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    """Token budget of this app's searches, preloads and ``memory_search`` calls that name none
    (:mod:`memcore.budget`); None: no budget, only the result count applies."""


class MemoryPolicies(BaseModel):
    """``default`` applies to every app; ``apps`` overrides it per app, field by field."""

    model_config = ConfigDict(extra="forbid")

    default: AppPolicy = Field(default_factory=AppPolicy)
    apps: dict[str, AppPolicy] = Field(default_factory=dict)


class ResolvedPolicy(BaseModel):
    """One app's policy with every choice made (:meth:`Settings.policy`)."""

    model_config = ConfigDict(frozen=True)

    app: str
    memory: MemorySwitch
    extractor: ExtractorChoice
    uses_model: bool
    tool_mode: ToolMode
    tools: ToolPolicy
    max_tokens: int | None = None

    # The questions every part asks of an app's policy, answered here only.
    @property
    def reads(self) -> bool:
        """Reads (get, read, search, preload, recall, export, Mem0 history) see this app's memory (``off``: they
        answer empty)."""
        return self.memory != "off"

    @property
    def writes(self) -> bool:
        """Writes of this app are accepted (``off``: refused; deletes and erasure always work)."""
        return self.memory != "off"

    def check_writes(self) -> None:
        """A write of an app whose memory is off (an add, update, tool write, import, backfill) is refused:
        PermissionDeniedError naming ``app``. Deletes and erasure never ask."""
        if not self.writes:
            raise PermissionDeniedError(f"memory is off for app {self.app!r} (memory.apps setting)", field="app")

    @property
    def archives(self) -> bool:
        """Ingest archives this app's turns and records a job (``off``: nothing is stored)."""
        return self.memory != "off"

    @property
    def extracts(self) -> bool:
        """Archived turns of this app are extracted into memories (``archive_only`` / ``off``: never)."""
        return self.memory == "on"

    def check_mode(self, mode: ToolMode | str | None) -> None:
        """A caller that names a tool ``mode`` other than the app's is refused (the mode is a deployment
        setting): PermissionDeniedError naming ``mode``; None always passes."""
        if mode is not None and str(mode) != self.tool_mode.value:
            raise PermissionDeniedError(f"app {self.app!r} runs tools in {self.tool_mode.value} mode (a deployment "
                                        f"setting), not {mode}", field="mode")

    def default_budget(self, max_tokens: int | None) -> int | None:
        """The token budget of a search, preload or ``memory_search``: its own, else the app's (or None)."""
        return max_tokens if max_tokens is not None else self.max_tokens

    def enabled_tools(self) -> set[str]:
        """What the extractor may use (the auto mode's enabled set) — in auto mode."""
        return self.tools.enabled_tools(ToolMode.AUTO)

    def exposed_tools(self) -> list[str]:
        """What agents of this app see and may run: the exposed tools of its mode (none when memory is off)."""
        return self.tools.exposed_tools(self.tool_mode) if self.reads else []

    def offered_tools(self) -> list[str]:
        """What an MCP client of this app is offered (``tools/list``, and the only names ``tools/call`` runs):
        the exposed tools, then :data:`memcore.vocabulary.RECALL`; none when memory is off."""
        return [*self.exposed_tools(), RECALL] if self.reads else []
