# Vendored from the openai-agents 0.24.0 sdist (openai_agents-0.24.0.tar.gz, tests/test_responses.py:
# get_text_message only), MIT License, Copyright (c) 2025 OpenAI (full text: LICENSE in this folder).
from __future__ import annotations

from openai.types.responses import ResponseOutputItem, ResponseOutputMessage, ResponseOutputText


def get_text_message(content: str) -> ResponseOutputItem:
    return ResponseOutputMessage(
        id="1",
        type="message",
        role="assistant",
        content=[ResponseOutputText(text=content, type="output_text", annotations=[], logprobs=[])],
        status="completed",
    )
