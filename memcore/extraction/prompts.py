"""Prompts and tool schemas of the LLM extractor and the assistant-episode stage.

Existing memories are shown to the model with small integer ids (``[1]``, ``[2]``, ...); the
extractor maps them back to real ids after parsing, so the model never copies a 64-character
hash. Times in the conversation are absolute (UTC) and the current date is stated, so the
model can resolve "yesterday" or "next Friday" into an absolute ISO ``event_time``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from memcore.extraction.events import Event
from memcore.model import Entry, Kind
from memcore.vocabulary import (
    ADD,
    CLEAR,
    DELETE,
    EPISODE_TOOL,
    FACT_ADD,
    FACT_INVALIDATE,
    FACT_SUPERSEDE,
    FACT_TOOLS,
    UPDATE,
    PolicyName,
    function_schema,
)

_MEMORY_PROPS: dict[str, Any] = {
    "memory": {"type": "string", "description": "One self-contained statement, in the third person "
                                                "(\"The user ...\"), with every name, number and date it needs."},
    "topics": {"type": "array", "items": {"type": "string"}, "description": "A few short topic tags."},
    "memory_kind": {"type": "string", "enum": [k.value for k in Kind],
                    "description": "fact: a stable preference, identity or background detail; "
                                   "episode: something that happened at a particular time."},
    "event_time": {"type": "string", "description": "For an episode: when it happened, as an absolute ISO-8601 "
                                                    "time (resolve relative dates against the current date)."},
    "participants": {"type": "array", "items": {"type": "string"}, "description": "People involved in the episode."},
    "location": {"type": "string", "description": "Where the episode happened."},
}
_SMALL_ID: dict[str, Any] = {"memory_id": {"type": "integer", "minimum": 1,
                                           "description": "The number n of an existing memory shown as [n]."}}

_TRIPLE = ["subject", "predicate", "object"]
_FACT_PROPS: dict[str, Any] = {
    "subject": {"type": "string", "description": "The entity the fact is about; \"User\" for the user."},
    "predicate": {"type": "string", "description": "A short snake_case relation: lives_in, works_at, likes, ..."},
    "object": {"type": "string", "description": "The other entity or value."},
    "valid_from": {"type": "string", "description": "Since when, YYYY-MM-DD or ISO-8601 (default: the message "
                                                    "time)."},
}

_SCHEMAS: dict[str, tuple[str, dict[str, Any], list[str]]] = {
    ADD: ("Store a new long-term memory.", _MEMORY_PROPS, ["memory"]),
    UPDATE: ("Revise an existing memory; give its full new content.", {**_SMALL_ID, **_MEMORY_PROPS},
             ["memory_id", "memory"]),
    DELETE: ("Delete one existing memory the user asked to forget or that is plainly obsolete.", _SMALL_ID,
             ["memory_id"]),
    CLEAR: ("Delete every memory of the user. Only when the user explicitly asks to forget everything.", {}, []),
    FACT_ADD: ("Record a structured fact subject -> predicate -> object about the user's world (a person, "
               "place, job, relation) that holds now or from a date.", _FACT_PROPS, _TRIPLE),
    FACT_SUPERSEDE: ("Record that the object of a subject's predicate changed (e.g. the user moved to another "
                     "city): the new fact replaces the current one, which is kept as history.", _FACT_PROPS, _TRIPLE),
    FACT_INVALIDATE: ("Record that a fact stopped being true (without a replacement).", {
        **{k: _FACT_PROPS[k] for k in _TRIPLE},
        "ended": {"type": "string", "description": "When it stopped, YYYY-MM-DD or ISO-8601 (default: the message "
                                                   "time)."}}, _TRIPLE),
    EPISODE_TOOL: ("Record what the assistant provided in one user/assistant interaction as an episode.", {
        "pair": {"type": "integer", "minimum": 1, "description": "The number n of the interaction shown as [Pn]."},
        "memory": {"type": "string", "description": "What the user asked and what the assistant answered, "
                                                   "keeping the exact names, titles and numbers of the answer."},
        "topics": _MEMORY_PROPS["topics"],
    }, ["pair", "memory"]),
}


def tool_schema(name: str) -> dict[str, Any]:
    """The OpenAI function-calling schema of one extraction tool."""
    description, props, required = _SCHEMAS[name]
    return function_schema(name, description, props, required)


POLICY_INSTRUCTIONS: dict[PolicyName, str] = {
    "merge_similar": (
        "Update policy: merge similar. When new information supersedes, corrects or refines an existing memory, "
        "call memory_update on that memory with the merged, current version instead of adding a near-duplicate. "
        "Add only genuinely new information. Delete a memory only when the user asks to forget it or it is "
        "plainly obsolete."
    ),
    "append_only": (
        "Update policy: append only. Only call memory_add. Never update, delete or clear memories: when "
        "information changes, add the new version as a new memory and leave the old one as it is. "
        "Do not add a memory that repeats an existing one word for word."
    ),
    "preserve_history": (
        "Update policy: preserve history. Keep every earlier detail. Call memory_update only to enrich the same "
        "fact or event with compatible new details, keeping all the words, names, numbers and dates of the old "
        "memory. If a number, date or status changed, or the new information is about a different event, call "
        "memory_add and leave the old memory untouched. Call memory_delete only when the user clearly asks to "
        "forget something."
    ),
}


def system_prompt(policy: PolicyName, now: datetime, tools: Sequence[str]) -> str:
    """The extractor's system prompt for ``policy`` and the offered ``tools``."""
    if policy not in POLICY_INSTRUCTIONS:
        raise ValueError(f"unknown policy {policy!r}")
    clear = " memory_clear is only for an explicit request to forget everything." if CLEAR in tools else ""
    if any(t in FACT_TOOLS for t in tools):
        clear += (" Also keep the user's knowledge graph: call fact_add for each structured fact, fact_supersede "
                  "when a fact's object changed (a move, a new job), fact_invalidate when one stopped being true.")
    return (
        "You maintain the long-term memory of an assistant about one user. Read the new conversation and the "
        "existing memories, then call the memory tools for what is worth remembering in a later session: "
        "preferences, personal facts, plans, decisions and notable events. Skip small talk, questions without "
        "an answer and anything only needed right now. Use one call per memory; call no tool when nothing is "
        "worth remembering.\n"
        "Write each memory as one self-contained statement. Use memory_kind \"episode\" with an absolute ISO-8601 "
        "event_time (and participants and location when known) for things that happened at a time, \"fact\" "
        f"otherwise. Refer to existing memories by their number [n].{clear}\n"
        f"{POLICY_INSTRUCTIONS[policy]}\n"
        f"Current date and time (UTC): {_iso(now)}. Resolve relative times (\"yesterday\", \"next week\") "
        "against the time of the message they appear in."
    )


def render_existing(entries: Sequence[Entry]) -> str:
    """Existing memories as ``[n] (kind) text | details`` lines, numbered from 1."""
    if not entries:
        return "(none)"
    lines = []
    for n, e in enumerate(entries, 1):
        details = []
        if e.topics:
            details.append("topics: " + ", ".join(e.topics))
        if e.event_time:
            details.append(f"event_time: {_iso(e.event_time)}")
        if e.participants:
            details.append("participants: " + ", ".join(e.participants))
        if e.location:
            details.append(f"location: {e.location}")
        tail = f" | {'; '.join(details)}" if details else ""
        lines.append(f"[{n}] ({e.kind.value}) {e.text}{tail}")
    return "\n".join(lines)


def render_event(event: Event, names: Mapping[str, str]) -> str:
    return f"[{_iso(event.timestamp)}] {names.get(event.role, event.role)}: {event.text}"


def user_prompt(delta: Sequence[Event], existing: Sequence[Entry], names: Mapping[str, str]) -> str:
    conversation = "\n".join(render_event(e, names) for e in delta)
    return f"Existing memories:\n{render_existing(existing)}\n\nNew conversation:\n{conversation}"


EPISODE_SYSTEM = (
    "You extract reusable results that the assistant gave the user, so that a later session can find them. "
    "Each interaction below is numbered [Pn]. For every interaction whose assistant answer holds reusable "
    "information (a fact, a number, a name or title, a recommendation, a procedure), call assistant_episode once "
    "with its number and one self-contained statement of what the user asked and what the assistant answered "
    "(\"The assistant told the user ...\"). Keep the exact names, titles and numbers of the answer and add no "
    "number that is not in the interaction. Skip greetings, clarifying questions and answers with nothing to "
    "reuse. Current date and time (UTC): {now}."
)


def episode_prompt(pairs: Sequence[Sequence[Event]], names: Mapping[str, str], start: int = 1) -> str:
    """The interactions of the episode stage, numbered ``[P<start>]`` onwards."""
    blocks = []
    for n, pair in enumerate(pairs, start):
        body = "\n".join(render_event(e, names) for e in pair)
        blocks.append(f"[P{n}]\n{body}")
    return "\n\n".join(blocks)


def _iso(t: datetime) -> str:
    return t.isoformat().replace("+00:00", "Z")
