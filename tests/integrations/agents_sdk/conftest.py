"""The Agents SDK's own session tests (vendored, README.md) run against :class:`MemclusterSession`: one
memcluster (LocalShardBackend, hashing embedder, verbatim extractor) on 127.0.0.1 for the package."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from agents import set_tracing_disabled

from tests.integrations.agents_sdk.sessions import Live
from tests.serve_apps.conftest import serve_local

set_tracing_disabled(True)

_CONNECTIONS = ("tests SQLiteSession's own connection bookkeeping (private _connections, _connections_lock, "
                "_get_connection); MemclusterSession has none: its history is an inner SQLiteSession")
_CORRUPT = ("writes a corrupt row through SQLiteSession's private _locked_connection/messages_table; "
            "MemclusterSession's history is not reachable that way")
_DB_FILE = ("probes the SQLite file at db_path; MemclusterSession keeps its history in its own in-memory "
            "SQLiteSession and its archive in memcluster, never in that file")

#: The SDK tests that do not hold for MemclusterSession, each with the divergence (README.md lists them).
DIVERGENCES: dict[str, str] = {
    "test_sqlite_session_close_closes_worker_thread_connections": _CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": _CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": _CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": _CONNECTIONS,
    "test_sqlite_session_rollback_failure_evicts_connection": _CONNECTIONS,
    "test_sqlite_session_close_retries_quarantined_connection": _CONNECTIONS,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": _CONNECTIONS,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": _CORRUPT,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": _CORRUPT,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": _CORRUPT,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": _CORRUPT,
    "test_sqlite_session_file_lock_is_shared_across_instances": (
        "tests SQLiteSession's process-wide lock per db file (_lock, _file_lock_counts); " + _DB_FILE),
    "test_sqlite_session_failed_add_items_releases_write_lock": _DB_FILE,
    "test_sqlite_session_failed_clear_session_rolls_back": _DB_FILE,
    "test_sqlite_session_failed_pop_item_releases_write_lock": _DB_FILE,
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        name = getattr(item, "originalname", item.name)
        if "agents_sdk" in item.nodeid and name in DIVERGENCES:
            item.add_marker(pytest.mark.xfail(strict=True, reason=DIVERGENCES[name]))


@pytest.fixture(scope="package", autouse=True)
def live_memcluster(tmp_path_factory: pytest.TempPathFactory, hashing_embedder: Any) -> Iterator[str]:
    with serve_local(tmp_path_factory.mktemp("agents-sdk"), hashing_embedder) as served:
        Live.url = served.url
        try:
            yield served.url
            # the memcluster side of every session the SDK's tests made: each send was taken
            unsent = {s.session_id: (len(s.writes.pending), len(s.writes.refused)) for s in Live.sessions
                      if s.writes.pending or s.writes.refused}
            assert Live.sessions and unsent == {}, unsent
            assert any(s.jobs for s in Live.sessions)
        finally:
            Live.url = None
            Live.clients.clear()
            Live.sessions.clear()
