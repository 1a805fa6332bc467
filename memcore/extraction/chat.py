"""One tool-calling chat completion over the ``openai`` client, shared by the extractor stages.

Any OpenAI-compatible ``/v1/chat/completions`` endpoint works (vLLM in production). The client
is built with ``max_retries=0``: the extraction job owns retries (its cursor stays put on a
failure). Every API failure, timeout or unusable answer raises :class:`ExtractorError`.

Model callbacks, for tracing and tests:

- ``before_model(request)`` sees the request dict (model, messages, tools, ...) before it is
  sent; returning a dict replaces the request, ``None`` keeps it;
- ``after_model(response)`` sees the ``ChatCompletion``; returning a value replaces it,
  ``None`` keeps it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import openai

from memcore.errors import ExtractorError

BeforeModel = Callable[[dict[str, Any]], "dict[str, Any] | None"]
AfterModel = Callable[[Any], Any]


@dataclass(frozen=True)
class RawToolCall:
    """A tool call as the model sent it (arguments still a JSON string)."""

    id: str
    name: str
    arguments: str


class ChatClient:
    def __init__(
        self,
        base_url: str | None,
        model: str,
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        temperature: float | None = 0.0,
        before_model: BeforeModel | None = None,
        after_model: AfterModel | None = None,
        client: openai.OpenAI | None = None,
    ) -> None:
        if not model:
            raise ValueError("an extraction model name is required")
        if client is None:
            if not base_url:
                raise ValueError("an extractor base_url (or an openai client) is required")
            client = openai.OpenAI(base_url=base_url, api_key=api_key or "none", timeout=timeout, max_retries=0)
        self.client = client
        self.model = model
        self.timeout = timeout
        self.temperature = temperature
        self.before_model = before_model
        self.after_model = after_model

    def call(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]
    ) -> tuple[str, list[RawToolCall]]:
        """Send one request with ``tool_choice="auto"``; returns (text content, tool calls)."""
        request: dict[str, Any] = {"model": self.model, "messages": list(messages), "tools": list(tools),
                                   "tool_choice": "auto"}
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.before_model is not None:
            request = self.before_model(request) or request
        create: Any = self.client.chat.completions.create
        try:
            response = create(**{"timeout": self.timeout, **request})
        except openai.APITimeoutError as exc:
            raise ExtractorError(f"the extraction model timed out after {self.timeout:g} s", field="extractor") from exc
        except openai.APIStatusError as exc:
            raise ExtractorError(f"the extraction model answered HTTP {exc.status_code}: {_short(exc.message)}",
                                 field="extractor") from exc
        except openai.OpenAIError as exc:
            raise ExtractorError(f"the extraction model failed: {type(exc).__name__}: {_short(str(exc))}",
                                 field="extractor") from exc
        except (ValueError, TypeError, KeyError, AttributeError) as exc:  # an unparseable body
            raise ExtractorError(f"the extraction model sent an unreadable answer: {type(exc).__name__}: "
                                 f"{_short(str(exc))}", field="extractor") from exc
        if self.after_model is not None:
            replaced = self.after_model(response)
            response = response if replaced is None else replaced
        return _parse(response)


def _parse(response: Any) -> tuple[str, list[RawToolCall]]:
    choices = getattr(response, "choices", None)
    if not choices:
        raise ExtractorError(f"the extraction model sent no choices ({_short(repr(response))})", field="extractor")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise ExtractorError("the extraction model sent a choice without a message", field="extractor")
    calls: list[RawToolCall] = []
    for i, call in enumerate(getattr(message, "tool_calls", None) or []):
        fn = getattr(call, "function", None)
        calls.append(RawToolCall(
            id=str(getattr(call, "id", "") or f"call_{i + 1}"),
            name=str(getattr(fn, "name", "") or ""),
            arguments=str(getattr(fn, "arguments", "") or ""),
        ))
    return str(getattr(message, "content", "") or ""), calls


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
