"""The source stages of the backfill job: reading an archive and validating its rows.

JSON lines are read as text (``ray.data.read_text``), not with ``read_json``: the Arrow JSON
reader rejects a whole block when one value has the wrong type, and infers struct types for
the free-form ``tool_calls``; a line is parsed and validated on its own instead, so one bad row
is reported and skipped while the rest go on. Parquet rows arrive typed (``read_parquet``).
Both accept local paths and any pyarrow filesystem URI (``file://``, ``s3://``, ...).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from jobs import extract
from jobs.schema import RowError, parse_row


@dataclass
class Source:
    """What to read: files/URIs (``fmt`` jsonl | parquet; None: by extension) or rows already in memory."""

    paths: list[str] = field(default_factory=list)
    fmt: str | None = None
    rows: list[dict[str, Any]] | None = None
    label: str = "rows"

    def describe(self) -> str:
        return self.label if self.rows is not None else ", ".join(self.paths)


class Validate:
    """``map_batches`` function: raw rows → :data:`extract.SESSION_SCHEMA` rows; bad rows go to the stats."""

    def __init__(self, stats: Any, jsonl: bool) -> None:
        self.stats = stats
        self.jsonl = jsonl

    def __call__(self, batch: pa.Table) -> pa.Table:
        out: list[dict[str, Any]] = []
        failures: list[dict[str, Any]] = []
        skipped = turns = 0
        for raw in batch.to_pylist():
            where = str(raw.pop("path", "") or "")
            value: Any = raw.get("text") if self.jsonl else raw
            try:
                row = parse_row(value)
            except RowError as exc:
                failures.append({"source": where, "error": str(exc), "row": _snippet(value)})
                continue
            if row.turns == 0:
                skipped += 1
                continue
            turns += row.turns
            out.append({"app": row.key.app, "user": row.key.user, "session": row.session, "first_ts": row.first_ts,
                        "turns": row.turns, "events": row.events_json(),
                        "names": json.dumps(row.names) if row.names else ""})
        self.stats.add.remote({"sessions": len(out), "turns_read": turns, "skipped": skipped,
                               "failed_rows": len(failures)}, failures)
        return pa.Table.from_pylist(out, schema=extract.SESSION_SCHEMA)


def _snippet(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text[:200]


def read(source: Source, cpus: float = 1.0) -> tuple[Any, bool]:
    """The raw dataset and whether its rows are JSON lines."""
    import ray

    if source.rows is not None:
        items = [{"text": json.dumps(r, ensure_ascii=False, default=str), "path": f"{source.label}#{i}"}
                 for i, r in enumerate(source.rows)]
        return ray.data.from_items(items), True
    fmt = source.fmt or ("parquet" if all(p.rstrip("/").endswith((".parquet", ".pq")) for p in source.paths)
                         else "jsonl")
    if fmt == "parquet":
        return ray.data.read_parquet(source.paths, include_paths=True, num_cpus=cpus), False
    if fmt in ("jsonl", "json"):
        # lines, not read_json: one mistyped value must reject its row, not the whole file's block
        return ray.data.read_text(source.paths, include_paths=True, num_cpus=cpus), True
    raise ValueError(f"unknown archive format {fmt!r} (jsonl or parquet)")
