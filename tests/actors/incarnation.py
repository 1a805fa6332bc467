"""One shard incarnation in a process of its own, driven line by line over stdin/stdout (the fencing test,
:mod:`tests.actors.test_fencing`, pauses it with SIGSTOP).

``python -m tests.actors.incarnation DATA_DIR DSN SCHEMA``: builds shard 0 of one (PostgreSQL archive,
the hashing embedder), prints ``{"ready": <lease epoch>}``, then answers each request line
``{"call": METHOD, "args": [...]}`` (``ShardCore.METHOD(alice, *args)``) with ``{"ok": value}`` or
``{"error": name, "message": ...}``; ``{"call": "_threads"}`` lists the shard's live thread names (not a
shard call), ``{"call": "_wait", "args": [job_id]}`` waits for a job. End of input closes the shard.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path
from typing import Any

from actors.shard import Ack, ShardCore
from memcore.errors import MemoryServiceError
from memcore.model import UserKey
from memcore.settings import Settings
from memcore.stores.embedders import HashingEmbedder

ALICE = UserKey(app="app", user="alice")


def settings(data: Path, dsn: str, schema: str) -> Settings:
    return Settings(data_dir=data, shards=1, embedder={"kind": "hashing", "dim": 256},
                    archive={"backend": "postgres", "dsn": dsn, "db_schema": schema, "statement_timeout_s": 5})


def plain(value: Any) -> Any:
    if isinstance(value, Ack):
        return {"seq": value.seq, "value": plain(value.value)}
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value


def answer(core: ShardCore, request: dict[str, Any]) -> dict[str, Any]:
    call, args = request["call"], request.get("args", [])
    if call == "_threads":
        return {"ok": sorted(t.name for t in threading.enumerate() if t.name.startswith("shard"))}
    try:
        if call == "_wait":
            return {"ok": plain(core.jobs.wait(args[0], 30.0))}
        return {"ok": plain(getattr(core, call)(ALICE, *args))}
    except MemoryServiceError as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


def main(argv: list[str]) -> None:
    data, dsn, schema = argv
    core = ShardCore(settings(Path(data), dsn, schema), 0, HashingEmbedder(256))
    try:
        print(json.dumps({"ready": core.epoch}), flush=True)
        for line in sys.stdin:
            print(json.dumps(answer(core, json.loads(line)), default=str), flush=True)
    finally:
        core.close()


if __name__ == "__main__":
    main(sys.argv[1:])
