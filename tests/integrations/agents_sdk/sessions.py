"""The session constructor the vendored SDK tests call as ``SQLiteSession(session_id, db_path, ...)``:
a :class:`MemclusterSession` of app :data:`APP` against the live memcluster the package fixture started
(``conftest.py``). ``db_path`` is accepted and ignored: the session's history is its own (an in-memory
``SQLiteSession`` inside), its archive is memcluster's. Each session gets its own user, so tests that
reuse a session id never see each other's archived turns."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from agents.memory import SessionSettings

from memclient import AsyncMemoryClient
from memclient.integrations.openai_agents import MemclusterSession

APP = "sdk-sessions"
_users = itertools.count()


class Live:
    """The base URL of the running memcluster (set by the package fixture) and the clients handed out."""

    url: str | None = None
    clients: list[AsyncMemoryClient] = []  # noqa: RUF012 - one list for the test package
    sessions: list[MemclusterSession] = []  # noqa: RUF012 - every session handed out, checked at the end


def memcluster_session(
    session_id: str, db_path: str | Path = ":memory:", *,
    session_settings: SessionSettings | dict[str, Any] | None = None,
) -> MemclusterSession:
    if Live.url is None:
        raise RuntimeError("no memcluster is running: the agents_sdk conftest starts one")
    client = AsyncMemoryClient(Live.url)
    Live.clients.append(client)
    session = MemclusterSession(session_id, client, APP, f"sdk-user-{next(_users)}", session_settings=session_settings)
    Live.sessions.append(session)
    return session
