"""The data directory's own files (beside ``shards/``, whose contents :mod:`memcore.layout` names): the
shard count it was written with, the lock of the processes that use it, and where a re-shard keeps its
journal and its work.

- ``shard-count``: N, the number of shard directories (with embedded stores a user's entries live only
  in the directory of shard ``shard_of(key, N)``, so another N would miss them). Written by the first
  shard that opens the directory; a directory written before this file existed records the number of
  its shard directories. A shard (and ``memctl up``) refuses another count: :func:`check_shard_count`.
  Only ``memctl reshard`` changes it, as its last step (:mod:`cluster.reshard`).
- ``data.lock``: every shard holds a shared ``flock`` on it while it runs (:func:`hold_shared`);
  ``memctl reshard`` takes it exclusively (:func:`hold_exclusive`), so neither starts while the other
  runs.
- ``reshard.json`` (the plan) and ``reshard/`` (the new shard directories being written, the progress
  log, the old ones between the two renames of the switch): while the plan exists no shard starts.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from memcore.errors import StoreError, ValidationError
from memcore.settings import Settings

SHARDS_DIR, COUNT_FILE, LOCK_FILE = "shards", "shard-count", "data.lock"
PLAN_FILE, WORK_DIR = "reshard.json", "reshard"
_SHARD_DIR = re.compile(r"^\d{4,}$")


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` by ``text`` in one durable step (temp file, fsync, rename, fsync of the directory)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class DataRoot:
    path: Path

    @classmethod
    def of(cls, settings: Settings) -> DataRoot:
        return cls(Path(settings.data_dir).expanduser())

    @property
    def shards_dir(self) -> Path:
        return self.path / SHARDS_DIR

    @property
    def count_file(self) -> Path:
        return self.path / COUNT_FILE

    @property
    def lock_file(self) -> Path:
        return self.path / LOCK_FILE

    @property
    def plan_file(self) -> Path:
        return self.path / PLAN_FILE

    @property
    def work_dir(self) -> Path:
        return self.path / WORK_DIR

    def shard_dirs(self, base: Path | None = None) -> list[int]:
        """Numbers of the shard directories under ``base`` (default ``shards/``), ascending."""
        base = self.shards_dir if base is None else base
        if not base.is_dir():
            return []
        return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and _SHARD_DIR.match(p.name))

    def recorded(self) -> int | None:
        """The recorded shard count; for a directory written before the record, the number of its shard
        directories (None: a new directory)."""
        try:
            text = self.count_file.read_text(encoding="utf-8").strip()
        except FileNotFoundError:
            found = self.shard_dirs()
            return len(found) or None
        if not text.isdigit() or int(text) < 1:
            raise StoreError(f"{self.count_file} holds {text!r}, not a shard count", field="shards")
        return int(text)

    def record(self, shards: int) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.count_file, f"{shards}\n")

    def pending_plan(self) -> dict[str, Any] | None:
        """The plan of an unfinished ``memctl reshard`` (None: none)."""
        try:
            data: dict[str, Any] = json.loads(self.plan_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        return data


def unfinished_message(root: DataRoot, plan: dict[str, Any]) -> str:
    return (f"{root.path}: a change of the shard count to {plan.get('to')} is unfinished; run "
            f"`memctl reshard --data-dir {root.path} --shards {plan.get('to')}` again to complete it")


def check_shard_count(settings: Settings) -> None:
    """Refuse ``settings.shards`` when the embedded data directory was written with another count, or while
    a re-shard of it is unfinished; record the count of a new directory. (With the Qdrant server backend the
    entries do not live in shard directories: any count is allowed.)"""
    if settings.vector_store.backend != "edge":
        return
    root = DataRoot.of(settings)
    plan = root.pending_plan()
    if plan is not None:
        raise ValidationError(unfinished_message(root, plan), field="shards")
    recorded = root.recorded()
    if recorded is None or (recorded == settings.shards and not root.count_file.exists()):
        root.record(settings.shards)
    elif recorded != settings.shards:
        raise ValidationError(
            f"{root.path} holds {recorded} shards, but shards={settings.shards}: start it with shards={recorded}, "
            f"or change its shard count offline with `memctl reshard --data-dir {root.path} --shards "
            f"{settings.shards}`", field="shards")


class DataLock:
    """An ``flock`` on the data directory's lock file, released by :meth:`close`."""

    def __init__(self, root: DataRoot, mode: int) -> None:
        root.path.mkdir(parents=True, exist_ok=True)
        self._fh: IO[bytes] | None = root.lock_file.open("ab")
        try:
            fcntl.flock(self._fh.fileno(), mode | fcntl.LOCK_NB)
        except BlockingIOError:
            self._fh.close()
            self._fh = None
            raise

    def close(self) -> None:
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()  # closing the descriptor releases the lock


def hold_shared(settings: Settings) -> DataLock:
    """What a running shard holds; :class:`memcore.errors.StoreError` while a re-shard holds the directory."""
    root = DataRoot.of(settings)
    try:
        return DataLock(root, fcntl.LOCK_SH)
    except BlockingIOError:
        raise StoreError(f"{root.path} is locked by `memctl reshard` (the shard count is being changed)",
                         field="data_dir") from None


def hold_exclusive(root: DataRoot) -> DataLock | None:
    """The lock ``memctl reshard`` holds (None: a shard holds the directory, so memcluster runs on it)."""
    try:
        return DataLock(root, fcntl.LOCK_EX)
    except BlockingIOError:
        return None
