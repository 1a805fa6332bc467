"""Types that cross a boundary twice must agree: the archive's job and the HTTP job, the shard's
recall hit and the HTTP one, the client's search parameters and ``SearchOptions``, and the typed
shard client and the read/write split against ``ShardCore``."""

from __future__ import annotations

import inspect
import typing

from actors.shard import LOCAL, READS, WRITES, ShardCore
from actors.shard_client import ShardClient, SyncShardClient
from memclient import AsyncMemoryClient, MemoryClient
from memcore.records import JobRecord, RecallHit
from memcore.search_model import SearchOptions
from serve_apps.http.models import JobModel, RecallResponse, SearchRequest


def _fields(model: type) -> dict[str, object]:
    return {name: f.annotation for name, f in model.model_fields.items()}  # type: ignore[attr-defined]


def test_http_job_is_the_archive_job() -> None:
    assert _fields(JobModel) == _fields(JobRecord)


def test_http_recall_hit_is_the_archive_hit() -> None:
    (hit,) = typing.get_args(RecallResponse.model_fields["hits"].annotation)
    assert hit is RecallHit


def test_http_search_request_is_search_options() -> None:
    assert _fields(SearchRequest) == _fields(SearchOptions)


def test_client_search_parameters_are_search_options() -> None:
    for client in (MemoryClient, AsyncMemoryClient):
        params = inspect.signature(client.search).parameters
        options = [p for p in params if params[p].kind is inspect.Parameter.KEYWORD_ONLY]
        assert set(options) == set(SearchOptions.model_fields) - {"query"}, client
        assert [p for p in params if params[p].kind is inspect.Parameter.POSITIONAL_OR_KEYWORD] == [
            "self", "app", "user", "query"]


def _public_methods(cls: type) -> set[str]:
    """Public functions of ``cls`` (Ray's tracing wrapper, once ``ray.remote`` saw the class, adds a
    ``_ray_trace_ctx`` parameter to each: it is ignored below)."""
    return {n for n, v in vars(cls).items() if not n.startswith("_") and inspect.isfunction(v)}


def test_the_read_write_split_covers_shard_core_exactly() -> None:
    assert not READS & WRITES and not (READS | WRITES) & LOCAL
    assert READS | WRITES | LOCAL == _public_methods(ShardCore)


def test_the_typed_client_calls_shard_core_methods_with_their_parameters() -> None:
    by_shard = {"job", "export_users", "graph_export_users", "compact"}  # addressed by shard number, not a user key
    for name in _public_methods(ShardClient):
        if name in ("status", "wait_job", "find_job"):  # the whole backend; a poll of `job`; `job` asked of each shard
            continue
        assert name in READS | WRITES, name
        client = list(inspect.signature(getattr(ShardClient, name)).parameters)[1:]
        core = [p for p in inspect.signature(getattr(ShardCore, name)).parameters if not p.startswith("_ray")][1:]
        assert client == (["shard", *core] if name in by_shard else core), name


def test_the_sync_client_calls_shard_core_methods_with_their_parameters() -> None:
    for name in _public_methods(SyncShardClient):
        assert name in READS | WRITES, name
        client = list(inspect.signature(getattr(SyncShardClient, name)).parameters)[1:]
        core = [p for p in inspect.signature(getattr(ShardCore, name)).parameters if not p.startswith("_ray")][1:]
        assert client == (core if name == "backfill" else ["shard", *core]), name  # the user's shard, or by number
