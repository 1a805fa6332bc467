"""Pure request builders and response parsers shared by the sync and async clients.

Each builder returns a :class:`Call`: the HTTP method, path, query and JSON body, plus the
function that turns the decoded JSON of a 2xx answer into the typed result. The clients only
send the call and hand the response to :func:`finish`; nothing else differs between them.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from memclient.errors import InvalidRequest, MemclientError, Unavailable, Unreachable, error_class
from memclient.retry import Retry
from memclient.segments import segment_problem
from memclient.types import Entry, Job, PreloadResult, SearchHit, SearchResults

T = TypeVar("T")
DEFAULT_BASE_URL = "http://127.0.0.1:8000"
USER_AGENT = "memclient/0.1"
JOB_POLL_S = 0.05
"""How often ``wait_job`` asks for a job's state."""
TimeLike = datetime | str


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[Any], T]
    params: dict[str, str] | None = None
    body: dict[str, Any] | None = None
    idempotent: bool = False
    """Safe to send again when the answer was lost (:mod:`memclient.retry`)."""
    gone_is_done: bool = False
    """A retried try answered 404 means an earlier try did it (a delete)."""


def headers(api_key: str | None) -> dict[str, str]:
    out = {"Accept": "application/json", "User-Agent": USER_AGENT}
    if api_key:
        out["Authorization"] = f"Bearer {api_key}"
    return out


def ident(value: str, field: str) -> str:
    """``value`` as one percent-encoded path segment; an id a URL would change (:mod:`memclient.segments`)
    raises :class:`InvalidRequest` naming ``field`` before anything is sent."""
    problem = segment_problem(str(value))
    if problem is not None:
        raise InvalidRequest(f"{field} {problem}", error="ValidationError", field=field)
    return quote(str(value), safe="")


def user_path(app: str, user: str, *rest: str) -> str:
    """``/v1/apps/{app}/users/{user}/...``; ``rest`` are literal segments or :func:`ident` results."""
    return "/".join(["", "v1", "apps", ident(app, "app"), "users", ident(user, "user"), *rest])


def _time(value: TimeLike | None) -> str | None:
    if value is None:
        return None
    return value.isoformat() if isinstance(value, datetime) else str(value)


def _flag(value: bool) -> str:
    return "true" if value else "false"


def _none(_: Any) -> None:
    return None


def _dict(data: Any) -> dict[str, Any]:
    return dict(data) if isinstance(data, Mapping) else {"value": data}


def _entries(data: Any) -> list[Entry]:
    return [Entry.from_json(e) for e in data["entries"]]


# ----------------------------------------------------------------------------- bodies
def memory_body(
    text: str,
    *,
    topics: Sequence[str] | None = None,
    kind: str = "fact",
    event_time: TimeLike | None = None,
    participants: Sequence[str] | None = None,
    location: str | None = None,
    source: str | None = None,
    provenance: Sequence[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    key: str | None = None,
    ttl_s: float | None = None,
) -> dict[str, Any]:
    """The Memory JSON; unset optional fields are left out so the server's defaults apply."""
    body: dict[str, Any] = {"text": text, "kind": kind}
    optional: dict[str, Any] = {
        "topics": list(topics) if topics is not None else None,
        "event_time": _time(event_time),
        "participants": list(participants) if participants is not None else None,
        "location": location,
        "source": source,
        "provenance": list(provenance) if provenance is not None else None,
        "metadata": dict(metadata) if metadata is not None else None,
        "key": key,
        "ttl_s": ttl_s,
    }
    body.update({k: v for k, v in optional.items() if v is not None})
    return body


def expiry_body(ttl_s: float | None, expires_at: TimeLike | None, no_expiry: bool) -> dict[str, Any]:
    """An update's expiry: ``ttl_s`` restarts the lifetime, ``expires_at`` sets the time, ``no_expiry``
    removes the expiry (sent as ``expires_at: null``); none of them keeps it. The server refuses a mix."""
    body: dict[str, Any] = {}
    if ttl_s is not None:
        body["ttl_s"] = ttl_s
    if expires_at is not None:
        body["expires_at"] = _time(expires_at)
    elif no_expiry:
        body["expires_at"] = None
    return body


def search_body(query: str, options: Mapping[str, Any]) -> dict[str, Any]:
    body: dict[str, Any] = {"query": query}
    for name, value in options.items():
        if value is not None:
            body[name] = _time(value) if isinstance(value, datetime) else value
    return body


# ----------------------------------------------------------------------------- memories
def add(app: str, user: str, body: dict[str, Any]) -> Call[Entry]:
    return Call("POST", user_path(app, user, "memories"), Entry.from_json, body=body, idempotent=True)


def get(app: str, user: str, memory_id: str) -> Call[Entry]:
    return Call("GET", user_path(app, user, "memories", ident(memory_id, "memory_id")), Entry.from_json,
                idempotent=True)


def read(app: str, user: str, limit: int | None,
         metadata_filter: Mapping[str, Any] | None = None) -> Call[list[Entry]]:
    params = {"limit": str(limit)} if limit is not None else {}
    if metadata_filter:
        params["metadata_filter"] = json.dumps(dict(metadata_filter), separators=(",", ":"))
    return Call("GET", user_path(app, user, "memories"), _entries, params=params, idempotent=True)


def update(app: str, user: str, memory_id: str, body: dict[str, Any]) -> Call[Entry]:
    return Call("PATCH", user_path(app, user, "memories", ident(memory_id, "memory_id")), Entry.from_json,
                body=body)


def _delete_params(hard: bool | None, purge_sources: bool) -> dict[str, str] | None:
    params = {"hard": _flag(hard)} if hard is not None else {}
    if purge_sources:
        params["purge_sources"] = _flag(True)
    return params or None


def delete(app: str, user: str, memory_id: str, hard: bool | None, purge_sources: bool = False) -> Call[None]:
    return Call("DELETE", user_path(app, user, "memories", ident(memory_id, "memory_id")), _none,
                params=_delete_params(hard, purge_sources), idempotent=True, gone_is_done=True)


def clear(app: str, user: str, hard: bool | None, purge_sources: bool = False) -> Call[None]:
    return Call("DELETE", user_path(app, user, "memories"), _none, params=_delete_params(hard, purge_sources),
                idempotent=True)


def forget(app: str, user: str) -> Call[dict[str, Any]]:
    return Call("DELETE", user_path(app, user), _dict, idempotent=True)


def delete_session(app: str, user: str, session: str) -> Call[dict[str, Any]]:
    return Call("DELETE", user_path(app, user, "sessions", ident(session, "session")), _dict, idempotent=True)


def delete_turn(app: str, user: str, session: str, event_id: str) -> Call[dict[str, Any]]:
    return Call("DELETE", user_path(app, user, "sessions", ident(session, "session"), "events",
                                     ident(event_id, "event_id")), _dict, idempotent=True,
                gone_is_done=True)


def compact() -> Call[dict[str, Any]]:
    return Call("POST", "/v1/admin/compact", _dict, idempotent=True)


def search(app: str, user: str, body: dict[str, Any]) -> Call[SearchResults]:
    return Call("POST", user_path(app, user, "memories", "search"),
                lambda data: SearchResults((SearchHit.from_json(h) for h in data["hits"]), data.get("facts") or []),
                body=body, idempotent=True)


def preload(app: str, user: str, budget: int, message: str, mode: str, playbook: str | None,
            topics: Sequence[str] | None = None, topics_match: str | None = None,
            max_tokens: int | None = None, min_relevance: float | None = None,
            include_facts: bool = False) -> Call[PreloadResult]:
    body: dict[str, Any] = {"budget": budget, "message": message, "mode": mode}
    if playbook is not None:
        body["playbook"] = playbook
    if topics is not None:
        body["topics"] = list(topics)
    if topics_match is not None:
        body["topics_match"] = topics_match
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if min_relevance is not None:
        body["min_relevance"] = min_relevance
    if include_facts:
        body["include_facts"] = True
    return Call("POST", user_path(app, user, "preload"), PreloadResult.from_json, body=body, idempotent=True)


# ----------------------------------------------------------------------------- tools
def tools(app: str, mode: str | None) -> Call[list[dict[str, Any]]]:
    params = {"mode": mode} if mode else None
    return Call("GET", f"/v1/apps/{ident(app, 'app')}/tools", lambda data: list(data["tools"]), params=params,
                idempotent=True)


def call_tool(app: str, user: str, name: str, arguments: Mapping[str, Any],
              mode: str | None) -> Call[dict[str, Any]]:
    body: dict[str, Any] = {"arguments": dict(arguments), **({"mode": mode} if mode else {})}
    return Call("POST", user_path(app, user, "tools", ident(name, "name")), _dict, body=body)


# ----------------------------------------------------------------------------- auto memory
def ingest(
    app: str, user: str, session: str, events: Sequence[Mapping[str, Any]], wait: float | None,
    extra: Mapping[str, Any],
) -> Call[Job]:
    body: dict[str, Any] = {"events": [_event(e) for e in events], **{k: v for k, v in extra.items() if v is not None}}
    params = {"wait": f"{wait:g}"} if wait else None
    return Call("POST", user_path(app, user, "sessions", ident(session, "session"), "events"), Job.from_json,
                params=params, body=body)


def _event(event: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_time(v) if isinstance(v, datetime) else v) for k, v in event.items()}


def job(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/jobs/{ident(job_id, 'job_id')}", Job.from_json, idempotent=True)


def recall(app: str, user: str, body: dict[str, Any]) -> Call[dict[str, Any]]:
    return Call("POST", user_path(app, user, "sessions", "recall"), _dict, body=body, idempotent=True)


# ----------------------------------------------------------------------------- knowledge graph, diary
def _params(values: Mapping[str, Any]) -> dict[str, str]:
    """Query parameters of the values given (times as ISO-8601)."""
    return {k: (_time(v) if isinstance(v, datetime) else str(v)) or "" for k, v in values.items() if v is not None}


def _body(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (_time(v) if isinstance(v, datetime) else v) for k, v in values.items() if v is not None}


def graph_post(app: str, user: str, path: Sequence[str], body: Mapping[str, Any]) -> Call[dict[str, Any]]:
    """A write of the graph or diary routes (``graph/facts``, ``graph/facts/invalidate``, ``diary``)."""
    return Call("POST", user_path(app, user, *path), _dict, body=_body(body))


def graph_put_entity(app: str, user: str, body: Mapping[str, Any]) -> Call[dict[str, Any]]:
    return Call("PUT", user_path(app, user, "graph", "entities"), _dict, body=_body(body), idempotent=True)


def graph_delete(app: str, user: str, fact_id: str) -> Call[dict[str, Any]]:
    return Call("DELETE", user_path(app, user, "graph", "facts", ident(fact_id, "fact_id")), _dict)


def graph_get(app: str, user: str, path: Sequence[str], params: Mapping[str, Any]) -> Call[dict[str, Any]]:
    """A read of the graph or diary routes (``graph/facts``, ``graph/timeline``, ``graph/neighbourhood``,
    ``graph/entities/<name>``, ``diary``)."""
    return Call("GET", user_path(app, user, *path), _dict, params=_params(params) or None, idempotent=True)


# ----------------------------------------------------------------------------- health
def healthz() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _dict, idempotent=True)


def readyz() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", _dict, idempotent=True)


# ----------------------------------------------------------------------------- responses
def next_wait(retry: Retry, call: Call[Any], tried: int, response: httpx.Response | None) -> float | None:
    """Seconds to wait before trying ``call`` again after its ``tried``-th try got ``response`` (None: no
    HTTP answer), or None when that answer stands (:mod:`memclient.retry`)."""
    if not call.idempotent or tried >= retry.attempts:
        return None
    if response is None:
        return retry.delay(tried)
    if not retry.status_retryable(response.status_code):
        return None
    return retry.delay(tried, retry_after(response.headers.get("Retry-After")))


def finish(call: Call[T], response: httpx.Response, *, retried: bool = False) -> T:
    """The typed result of a 2xx answer; otherwise raise the matching :class:`MemclientError`."""
    if retried and call.gone_is_done and response.status_code == 404:
        return call.parse(None)
    if not response.is_success:
        raise error_from_response(response)
    data = response.json() if response.content else None
    try:
        return call.parse(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise MemclientError(f"unexpected response to {call.method} {call.path}: {exc!r}",
                             status=response.status_code, error="BadResponse") from exc


def error_from_response(response: httpx.Response) -> MemclientError:
    status = response.status_code
    error, field, message = _error_fields(response)
    cls = error_class(status)
    if cls is Unavailable:
        return Unavailable(message, status=status, error=error, field=field,
                           retry_after=retry_after(response.headers.get("Retry-After")))
    return cls(message, status=status, error=error, field=field)


def _error_fields(response: httpx.Response) -> tuple[str | None, str | None, str]:
    try:
        data = response.json()
    except ValueError:
        text = response.text.strip()
        return None, None, text[:500] or response.reason_phrase or f"HTTP {response.status_code}"
    if isinstance(data, Mapping):
        if "message" in data or "error" in data:
            return (_str(data.get("error")), _str(data.get("field")),
                    str(data.get("message") or data.get("error") or f"HTTP {response.status_code}"))
        detail = data.get("detail")
        if isinstance(detail, list) and detail and isinstance(detail[0], Mapping):  # FastAPI's default 422
            loc = [str(p) for p in detail[0].get("loc", []) if p not in ("body", "query", "path")]
            return "ValidationError", ".".join(loc) or None, str(detail[0].get("msg", "invalid request"))
        if detail is not None:
            return None, None, str(detail)
    return None, None, str(data)


def _str(value: Any) -> str | None:
    return None if value is None else str(value)


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds form); None when absent or a date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def transport_error(call: Call[Any], exc: httpx.TransportError) -> MemclientError:
    return Unreachable(f"{call.method} {call.path}: {type(exc).__name__}: {exc}", error=type(exc).__name__)
