from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.scripted_llm import ScriptedLLM


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    """A started scripted OpenAI-compatible server; push script items with ``llm.push(...)``."""
    with ScriptedLLM() as server:
        yield server
