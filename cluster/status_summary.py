"""What ``memctl status`` shows an operator beside readiness: per shard, the extraction queue depth,
running jobs, cursor lag (now minus the oldest unextracted turn's time) and the job counters by
status, from the same shard status that ``/readyz`` returns (the metrics sample the same sources)."""

from __future__ import annotations

import time
from typing import Any


def summarize(ready: dict[str, Any] | None, now: float | None = None) -> list[dict[str, Any]]:
    """One row per shard of a ``/readyz`` answer (empty when it has no shard statuses)."""
    now = time.time() if now is None else now
    rows: list[dict[str, Any]] = []
    for shard in (ready or {}).get("shards") or []:
        ext = shard.get("extraction") or {}
        oldest = ext.get("oldest_unextracted")
        rows.append({
            "shard": shard.get("shard"),
            "entries": shard.get("entries"),
            "queue_depth": ext.get("queued", 0),
            "running": ext.get("running", 0),
            "cursor_lag_s": round(max(0.0, now - oldest), 1) if isinstance(oldest, (int, float)) else 0.0,
            "jobs": dict(ext.get("jobs") or {}),
            "rebuilt_on_start": shard.get("rebuilt_on_start"),
        })
    return rows
