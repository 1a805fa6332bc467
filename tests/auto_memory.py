"""Helpers shared by the auto-memory tests: session events and scripted-model answers."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from testkit.scripted_llm import ToolCall, messages_text, tool_call

T0 = datetime(2025, 3, 1, 9, 0, tzinfo=UTC)
TOKEN_RE = re.compile(r"\btoken-\d+\b")


def turns(n: int, *, start: int = 0, text: str = "turn {i} of the conversation about kiwis",
          t0: datetime = T0, prefix: str = "e") -> list[dict[str, Any]]:
    """``n`` alternating user/assistant events ``{prefix}{i}``, one minute apart, as JSON dicts."""
    return [
        {"id": f"{prefix}{i}", "role": "user" if i % 2 == 0 else "assistant",
         "content": text.format(i=i), "timestamp": (t0 + timedelta(minutes=i)).isoformat()}
        for i in range(start, start + n)
    ]


def extractor_settings(base_url: str, **overrides: Any) -> dict[str, Any]:
    return {"base_url": base_url, "model": "scripted-extractor", **overrides}


def remember_tokens(request: dict[str, Any]) -> list[ToolCall]:
    """A scripted answer: one ``memory_add`` per ``token-N`` in the new conversation (user prompt)."""
    text = messages_text(request, "user")
    conversation = text.split("New conversation", 1)[-1] if "New conversation" in text else text
    found = list(dict.fromkeys(TOKEN_RE.findall(conversation)))
    return [tool_call("memory_add", {"memory": f"The user's lucky {t} is remembered", "topics": ["luck"]})
            for t in found]


def delayed(seconds: float, answer: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], Any]:
    """``answer`` sent after ``seconds`` (a slow model)."""
    from testkit.scripted_llm import Reply

    def item(request: dict[str, Any]) -> Reply:
        calls = answer(request)
        return Reply(tool_calls=tuple(calls), delay=seconds)

    return item
