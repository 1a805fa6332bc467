"""An agent loop with long-term memory: any OpenAI-compatible chat model + the memcluster tools.

Each turn it (1) preloads the user's memories that matter for the message and injects them
into the system prompt (or, with ``--inject user``, as a user-side message before the
question), (2) offers the service's exposed memory tools to the model, (3) executes the
model's tool calls through ``POST .../tools/{name}`` and loops until the model answers, and
(4) sends the session's messages, as it holds them, to the service's ingest route: auto memory
extracts what is worth keeping in the background (in an app whose tool mode is ``auto`` the model
gets no write tools at all, and this is how memories form; the service decides the mode).
Commands: ``/memory`` waits for the session's extraction job and lists the user's memories,
``/new`` starts a new session (the conversation resets, the memories stay), ``/exit`` ends.

Environment: ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_MODEL`` (the chat model) and
``MEMCLUSTER_URL``, ``MEMCLUSTER_API_KEY`` (the memory service)::

    memctl up
    OPENAI_BASE_URL=http://127.0.0.1:8001/v1 OPENAI_MODEL=qwen python examples/agent.py --user alice

Only ``openai`` and ``memclient`` (httpx) are needed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, cast

import openai

from memclient import MemclientError, MemoryClient

SYSTEM_PROMPT = (
    "You are a helpful assistant with long-term memory. When the user shares a lasting fact, "
    "preference or rule about themselves, save it with memory_add (one self-contained statement). "
    "When a question may depend on something said in an earlier session, use memory_search first."
)


@dataclass
class AgentConfig:
    app: str
    user: str
    session: str = ""
    model: str = "gpt-4o-mini"
    budget: int = 10
    inject: str = "system"  # system | user
    tool_mode: str | None = None
    """agentic | auto; None: the app's mode, as the service's deployment set it (naming another is a 403)."""
    system_prompt: str = SYSTEM_PROMPT
    max_tool_rounds: int = 8
    ingest: bool = True
    """Send each finished turn's session to ingest (auto memory)."""
    job_wait_s: float = 30.0
    """How long ``/memory`` and ``/new`` wait for the session's extraction job."""


def new_session_id() -> str:
    return f"session-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"


class MemoryAgent:
    """The loop, with its input and output injectable: ``run(lines)`` writes through ``out``."""

    def __init__(
        self, memory: MemoryClient, llm: openai.OpenAI, config: AgentConfig, out: Callable[[str], None] = print
    ) -> None:
        self.memory = memory
        self.llm = llm
        self.config = config
        self.out = out
        self.session = config.session or new_session_id()
        self.history: list[dict[str, Any]] = []
        self._tools: list[dict[str, Any]] | None = None
        self.last_job: str | None = None

    # ------------------------------------------------------------------ commands
    def run(self, lines: Iterable[str]) -> None:
        """Process input lines until ``/exit`` or the end of the input."""
        self.out(f"Memory chat ready. Session: {self.session}")
        self.out("Commands: /memory (show memories), /new (new session), /exit (quit)")
        for line in lines:
            if not self.handle(line):
                return
        self.out("Goodbye!")

    def handle(self, line: str) -> bool:
        """One input line; False once the user asked to exit."""
        text = line.strip()
        if not text:
            return True
        if text == "/exit":
            self.out("Goodbye!")
            return False
        if text == "/memory":
            self.show_memories()
        elif text == "/new":
            self.new_session()
        else:
            self.turn(text)
        return True

    def show_memories(self) -> None:
        self.settle()
        entries = self.memory.read(self.config.app, self.config.user)
        if not entries:
            self.out("No memories yet.")
            return
        self.out(f"Memories of {self.config.user} ({len(entries)}):")
        for e in entries:
            topics = f" [{', '.join(e.topics)}]" if e.topics else ""
            self.out(f"  - {e.id[:12]} ({e.kind}) {e.text}{topics}")

    def new_session(self) -> str:
        self.settle()
        previous, self.session = self.session, new_session_id()
        self.history = []
        self._tools = None
        self.out(f"New session: {self.session} (previous: {previous}); memories are kept.")
        return self.session

    # ------------------------------------------------------------------ auto memory
    def remember(self) -> None:
        """Send the session's messages to ingest (the whole session: the service tells old from new)."""
        if not self.config.ingest or not self.history:
            return
        try:
            job = self.memory.ingest(self.config.app, self.config.user, self.session, self.history)
        except MemclientError as exc:  # memory is an aid: a failed ingest never fails the turn
            self.out(f"(memory: ingest failed: {exc})")
            return
        self.last_job = job.job_id if not job.finished else None
        if job.finished:
            self.report(job)

    def settle(self) -> None:
        """Wait for the session's pending extraction job (at most ``job_wait_s``) and report it."""
        if self.last_job is None:
            return
        job_id, self.last_job = self.last_job, None
        deadline = time.monotonic() + self.config.job_wait_s
        try:
            job = self.memory.job(job_id)
            while not job.finished and time.monotonic() < deadline:
                time.sleep(0.1)
                job = self.memory.job(job_id)
        except MemclientError as exc:
            self.out(f"(memory: job {job_id} unknown: {exc})")
            return
        self.report(job)

    def report(self, job: Any) -> None:
        counts = job.data.get("counts", {})
        if job.status == "done":
            self.out(f"(memory: extraction done, {counts.get('applied', 0)} applied)")
        elif job.status == "partial":
            failed = "; ".join(f"{op.get('type')}: {op.get('error')}" for op in job.failed_operations)
            self.out(f"(memory: extraction partial, {counts.get('applied', 0)} applied, "
                     f"{counts.get('failed', len(job.failed_operations))} failed: {failed})")
        elif job.status == "skipped":
            return
        else:
            self.out(f"(memory: extraction {job.status}: {job.data.get('reason') or 'still running'})")

    # ------------------------------------------------------------------ a turn
    def tools(self) -> list[dict[str, Any]]:
        if self._tools is None:
            self._tools = self.memory.tools(self.config.app, self.config.tool_mode)
        return self._tools

    def prompt(self, text: str) -> list[dict[str, Any]]:
        """System prompt (+ preloaded memories), the session so far, the new user message."""
        system = self.config.system_prompt
        memory_block = ""
        if self.config.budget != 0:
            try:
                pre = self.memory.preload(self.config.app, self.config.user, budget=self.config.budget,
                                          message=text, mode=self.config.inject)
                memory_block = pre.text
            except MemclientError as exc:  # memory is an aid: a failed preload never fails the turn
                self.out(f"(preload failed: {exc})")
        messages: list[dict[str, Any]] = []
        if memory_block and self.config.inject == "system":
            system = f"{system}\n\n{memory_block}"
        messages.append({"role": "system", "content": system})
        messages.extend(self.history)
        if memory_block and self.config.inject == "user":
            messages.append({"role": "user", "content": memory_block})
        messages.append({"role": "user", "content": text})
        return messages

    def turn(self, text: str) -> str:
        """Answer one user message, running tool calls until the model replies with text."""
        messages = self.prompt(text)
        self.history.append({"role": "user", "content": text})
        tools = self.tools()
        for round_ in range(self.config.max_tool_rounds + 1):
            offer = tools if tools and round_ < self.config.max_tool_rounds else None
            kwargs: dict[str, Any] = {"tools": offer} if offer else {}
            response = self.llm.chat.completions.create(model=self.config.model, messages=cast(Any, messages),
                                                        **kwargs)
            message = response.choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments)
                     for c in message.tool_calls or [] if c.type == "function"]
            if not calls:
                answer = message.content or ""
                self.history.append({"role": "assistant", "content": answer})
                self.out(f"Assistant: {answer}")
                self.remember()
                return answer
            step: list[dict[str, Any]] = [{
                "role": "assistant", "content": message.content,
                "tool_calls": [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                               for cid, name, args in calls],
            }]
            if message.content:
                self.out(f"Assistant: {message.content}")
            for cid, name, args in calls:
                result = self.execute(name, args)
                step.append({"role": "tool", "tool_call_id": cid, "content": json.dumps(result)})
            messages.extend(step)
            self.history.extend(step)
        answer = f"(no answer after {self.config.max_tool_rounds} rounds of tool calls)"
        self.history.append({"role": "assistant", "content": answer})
        self.out(f"Assistant: {answer}")
        self.remember()
        return answer

    def execute(self, name: str, raw_arguments: str) -> dict[str, Any]:
        """Run one tool call on the service; errors go back to the model as a JSON result."""
        self.out(f"Tool call: {name} {raw_arguments}")
        try:
            arguments = json.loads(raw_arguments or "{}")
            if not isinstance(arguments, dict):
                raise ValueError("arguments must be a JSON object")
            result = self.memory.call_tool(self.config.app, self.config.user, name, arguments,
                                           mode=self.config.tool_mode)
        except ValueError as exc:
            result = {"error": "InvalidArguments", "message": str(exc)}
        except MemclientError as exc:
            result = {"error": exc.error or type(exc).__name__, "field": exc.field, "message": exc.message}
        self.out(f"Tool result: {json.dumps(result)}")
        return result


# ---------------------------------------------------------------------- command line
def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--app", default="demo", help="memcluster app name (default: demo)")
    p.add_argument("--user", default="user", help="user id (default: user)")
    p.add_argument("--session", default="", help="session id (default: generated)")
    p.add_argument("--budget", type=int, default=10, help="preload budget: 0 off, -1 all, N newest/relevant")
    p.add_argument("--inject", choices=["system", "user"], default="system", help="where preloaded memories go")
    p.add_argument("--tool-mode", choices=["agentic", "auto"], default=None,
                   help="expect this tool mode (default: the app's, set by the service's deployment)")
    p.add_argument("--no-ingest", action="store_true", help="do not send sessions for extraction (auto memory)")
    p.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    return p.parse_args(argv)


def main(
    argv: Sequence[str] | None = None, lines: Iterable[str] | None = None, out: Callable[[str], None] | None = None
) -> int:
    """Run the agent; ``lines`` (default: stdin) and ``out`` (default: print) make it scriptable."""
    args = parse_args(argv)
    config = AgentConfig(app=args.app, user=args.user, session=args.session, model=args.model,
                         budget=args.budget, inject=args.inject, tool_mode=args.tool_mode, ingest=not args.no_ingest)
    llm = openai.OpenAI(base_url=os.environ.get("OPENAI_BASE_URL") or None,
                        api_key=os.environ.get("OPENAI_API_KEY") or "not-needed")
    with MemoryClient(os.environ.get("MEMCLUSTER_URL", "http://127.0.0.1:8000"),
                      api_key=os.environ.get("MEMCLUSTER_API_KEY") or None) as memory:
        agent = MemoryAgent(memory, llm, config, out or print)
        agent.run(lines if lines is not None else _stdin_lines())
    return 0


def _stdin_lines() -> Iterable[str]:
    while True:
        try:
            yield input("You: ")
        except EOFError:
            return


if __name__ == "__main__":
    sys.exit(main())
