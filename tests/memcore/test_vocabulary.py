"""The vocabulary is the one home of the domain's names: every user of a name agrees with it."""

from __future__ import annotations

import typing

from memcore.extraction import prompts
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.extraction.wrapper import ExtractorWrapper
from memcore.model import Kind, Operation
from memcore.policy.apply import PLANNERS
from memcore.settings import ExtractorSettings
from memcore.tools import SCHEMAS, openai_schema
from memcore.vocabulary import (
    ALL_TOOLS,
    EPISODE_TOOL,
    EXTRACTION_TOOLS,
    GRANULARITIES,
    POLICIES,
    TOOL_OPERATIONS,
    enabled_operations,
)


def test_policies_have_one_planner_and_one_prompt_each() -> None:
    assert tuple(PLANNERS) == POLICIES
    assert tuple(prompts.POLICY_INSTRUCTIONS) == POLICIES
    assert typing.get_args(ExtractorSettings.model_fields["policy"].annotation) == POLICIES


def test_granularities_are_the_settings_and_the_extractors() -> None:
    assert typing.get_args(ExtractorSettings.model_fields["granularity"].annotation) == GRANULARITIES
    for g in GRANULARITIES:
        assert VerbatimExtractor(g).granularity == g


def test_tool_operations_cover_the_extraction_tools() -> None:
    assert tuple(TOOL_OPERATIONS) == EXTRACTION_TOOLS and set(EXTRACTION_TOOLS) <= set(ALL_TOOLS)
    assert set(TOOL_OPERATIONS.values()) == set(typing.get_args(Operation.model_fields["type"].annotation))
    assert enabled_operations({"memory_add", "memory_search", "memory_clear"}) == {"add", "clear"}


def test_both_schema_tables_build_the_same_shape() -> None:
    assert set(SCHEMAS) == set(ALL_TOOLS)
    for name in (*EXTRACTION_TOOLS, EPISODE_TOOL):
        fn = prompts.tool_schema(name)["function"]
        assert fn["name"] == name and fn["parameters"]["additionalProperties"] is False
    for name in ALL_TOOLS:
        agent = openai_schema(name)
        assert set(agent) == {"type", "function"} and set(agent["function"]) == {"name", "description", "parameters"}
    kinds = [k.value for k in Kind]
    assert openai_schema("memory_add")["function"]["parameters"]["properties"]["memory_kind"]["enum"] == kinds
    assert prompts.tool_schema("memory_add")["function"]["parameters"]["properties"]["memory_kind"]["enum"] == kinds


def test_extractors_declare_their_capabilities_and_wrappers_forward_them() -> None:
    verbatim = VerbatimExtractor("window")
    llm = LLMExtractor("http://127.0.0.1:9/v1", "m", "k", policy="preserve_history")
    assert (verbatim.default_policy, verbatim.uses_existing, verbatim.max_events) == ("append_only", False, None)
    assert (llm.default_policy, llm.uses_existing) == ("preserve_history", True) and llm.max_events
    for inner in (verbatim, llm):
        wrapped = ExtractorWrapper(ExtractorWrapper(inner))
        assert (wrapped.default_policy, wrapped.uses_existing, wrapped.max_events) == (
            inner.default_policy, inner.uses_existing, inner.max_events)
