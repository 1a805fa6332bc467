"""The resolved app policy is the one place that answers what an app's memory switch, tool mode and token
budget allow (:class:`memcore.app_policy.ResolvedPolicy`)."""

from __future__ import annotations

import pytest

from memcore.app_policy import ToolMode
from memcore.errors import PermissionDeniedError
from memcore.settings import Settings


def _settings() -> Settings:
    return Settings(memory={"apps": {"arch": {"memory": "archive_only"}, "dark": {"memory": "off"},
                                     "tight": {"max_tokens": 40, "tool_mode": "auto"}}})


@pytest.mark.parametrize(("app", "reads", "writes", "archives", "extracts"), [
    ("any", True, True, True, True),
    ("arch", True, True, True, False),
    ("dark", False, False, False, False),
])
def test_the_memory_switch_answers(app: str, reads: bool, writes: bool, archives: bool, extracts: bool) -> None:
    policy = _settings().policy(app)
    assert (policy.reads, policy.writes, policy.archives, policy.extracts) == (reads, writes, archives, extracts)
    assert bool(policy.exposed_tools()) is reads
    if writes:
        policy.check_writes()
    else:
        with pytest.raises(PermissionDeniedError) as info:
            policy.check_writes()
        assert info.value.field == "app" and f"memory is off for app {app!r}" in str(info.value)


def test_check_mode_refuses_another_mode_naming_the_field() -> None:
    policy = _settings().policy("tight")
    assert policy.tool_mode is ToolMode.AUTO
    policy.check_mode(None)
    policy.check_mode("auto")
    policy.check_mode(ToolMode.AUTO)
    with pytest.raises(PermissionDeniedError) as info:
        policy.check_mode(ToolMode.AGENTIC)
    assert info.value.field == "mode" and "runs tools in auto mode" in str(info.value)


def test_default_budget_is_the_callers_else_the_apps() -> None:
    s = _settings()
    assert s.policy("tight").default_budget(None) == 40
    assert s.policy("tight").default_budget(7) == 7
    assert s.policy("any").default_budget(None) is None


def test_offered_tools_are_the_exposed_then_recall_and_none_when_memory_is_off() -> None:
    settings = _settings()
    assert settings.policy("any").offered_tools() == [*settings.policy("any").exposed_tools(), "memory_recall"]
    assert settings.policy("tight").offered_tools() == ["memory_search", "memory_recall"]  # auto mode
    assert settings.policy("dark").offered_tools() == []
