"""The domain's names, declared once: memory tools, the operations they propose, update policies,
verbatim granularities and the default speaker names. Everything else imports them from here
(the agent tools, the extractor's prompts, the settings, the shard, the CLI's choices).

Also the one OpenAI function-calling schema builder (:func:`function_schema`) that the agent
tools (:mod:`memcore.tools`) and the extractor's tools (:mod:`memcore.extraction.prompts`) share.
This module imports nothing of the project: it is a leaf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

# ------------------------------------------------------------------ tools
ADD, UPDATE, SEARCH, LOAD, DELETE, CLEAR = (
    "memory_add", "memory_update", "memory_search", "memory_load", "memory_delete", "memory_clear",
)
ALL_TOOLS: tuple[str, ...] = (ADD, UPDATE, SEARCH, LOAD, DELETE, CLEAR)
"""The six memory tools, in the order they are listed to an agent."""
DIARY_WRITE, DIARY_READ, KG_ADD, KG_QUERY, KG_TIMELINE, KG_INVALIDATE = (
    "memory_diary_write", "memory_diary_read", "memory_kg_add", "memory_kg_query", "memory_kg_timeline",
    "memory_kg_invalidate",
)
GRAPH_TOOLS: tuple[str, ...] = (DIARY_WRITE, DIARY_READ, KG_ADD, KG_QUERY, KG_TIMELINE, KG_INVALIDATE)
"""The knowledge-graph and diary tools (:mod:`memcore.graph_tools`), listed after :data:`ALL_TOOLS`; off unless
an app's ``tools.enabled`` turns them on. Their arguments are those of seed 002's MemPalace tools."""
GRAPH_READ_TOOLS: frozenset[str] = frozenset({DIARY_READ, KG_QUERY, KG_TIMELINE})
"""The graph tools that only read (they run beside the user's writes; Auto mode shows them once enabled)."""
AGENT_TOOLS: tuple[str, ...] = ALL_TOOLS + GRAPH_TOOLS
"""Every tool an agent may be shown and run (by name), in the order they are listed."""
MEMPALACE_NAMES: Mapping[str, str] = {
    "mempalace_diary_write": DIARY_WRITE, "mempalace_diary_read": DIARY_READ, "mempalace_kg_add": KG_ADD,
    "mempalace_kg_query": KG_QUERY, "mempalace_kg_timeline": KG_TIMELINE, "mempalace_kg_invalidate": KG_INVALIDATE,
}
"""Seed 002's MemPalace tool name → the graph tool that takes the same arguments (the trpc-agent-py tools)."""
RECALL = "memory_recall"
"""The archive tool: search the raw turns of the user's other sessions (not one of :data:`ALL_TOOLS`, which
run against memories; MCP lists it after them)."""
EXTRACTION_TOOLS: tuple[str, ...] = (ADD, UPDATE, DELETE, CLEAR)
"""The tools an extractor may call: each proposes one operation (:data:`TOOL_OPERATIONS`)."""
FACT_ADD, FACT_SUPERSEDE, FACT_INVALIDATE = "fact_add", "fact_supersede", "fact_invalidate"
FACT_TOOLS: tuple[str, ...] = (FACT_ADD, FACT_SUPERSEDE, FACT_INVALIDATE)
"""The extractor's knowledge-graph tools, offered beside :data:`EXTRACTION_TOOLS` when the ``extractor.graph``
setting is on: each proposes one fact operation (:data:`FACT_OPERATIONS`)."""
FactOperationType = Literal["add", "supersede", "invalidate"]
FACT_OPERATIONS: Mapping[str, FactOperationType] = {FACT_ADD: "add", FACT_SUPERSEDE: "supersede",
                                                     FACT_INVALIDATE: "invalidate"}
EPISODE_TOOL = "assistant_episode"
"""The one tool of the assistant-episode stage."""

OperationType = Literal["add", "update", "delete", "clear"]
TOOL_OPERATIONS: Mapping[str, OperationType] = {ADD: "add", UPDATE: "update", DELETE: "delete", CLEAR: "clear"}
"""Extraction tool → the operation type it proposes (and the operation a tool switch enables)."""


def enabled_operations(tools: Sequence[str] | set[str] | frozenset[str]) -> frozenset[str]:
    """The operation types the enabled ``tools`` allow (tools that propose no operation are ignored)."""
    return frozenset(TOOL_OPERATIONS[t] for t in tools if t in TOOL_OPERATIONS)


def function_schema(name: str, description: str, properties: Mapping[str, Any],
                    required: Sequence[str]) -> dict[str, Any]:
    """An OpenAI function-calling tool schema (no extra arguments allowed)."""
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": dict(properties), "required": list(required),
        "additionalProperties": False}}}


# ------------------------------------------------------------------ policies
PolicyName = Literal["merge_similar", "append_only", "preserve_history"]
POLICIES: tuple[PolicyName, ...] = ("merge_similar", "append_only", "preserve_history")
DEFAULT_POLICY: PolicyName = "merge_similar"

# ------------------------------------------------------------------ search
KeywordQuery = Literal["raw", "content"]
"""What BM25 searches: the query as given, or its content words (no stop or question words)."""
MAX_RECALL_RESULTS = 100
"""The most archived turns one session recall returns (HTTP, MCP and the shard check it)."""
MIN_RELEVANCE_ARG = "min_relevance"
"""The option of ``memory_search`` (and of preload) that keeps only hits at least this relevant
(:mod:`memcore.relevance`: the query/memory cosine less the name penalty, -1..1); a search's
``similarity_threshold``."""

# ------------------------------------------------------------------ HTTP
DEFAULT_PORT = 8000
"""The HTTP port of the service unless ``http.port`` says otherwise (``memctl`` and the settings use it)."""

# ------------------------------------------------------------------ verbatim extraction
# ---------------------------------------------------------- token budgets
MAX_TOKENS_LIMIT = 1_000_000
"""The largest ``max_tokens`` a search, preload or ``memory_search`` accepts."""
CounterName = Literal["whitespace", "tokenizer"]
COUNTERS: tuple[CounterName, ...] = ("whitespace", "tokenizer")
"""How tokens are counted (:mod:`memcore.budget`): whitespace words, or the BERT WordPiece tokenizer's count."""

Granularity = Literal["turn", "round", "session", "window"]
GRANULARITIES: tuple[Granularity, ...] = ("turn", "round", "session", "window")

# ------------------------------------------------------------------ speakers
DEFAULT_NAMES: Mapping[str, str] = {"user": "User", "assistant": "Assistant"}
"""How a role is named in an entry's text and in the extractor's prompt unless names are given."""
