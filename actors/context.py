"""What every part of one shard shares, handed to each in one frozen object (:class:`ShardContext`): the
settings, the shard's layout, the service it serves from, its event archive, and the two ways into its
writes gate (:class:`actors.write_gate.WriteGate`)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from actors.current import CurrentService
from memcore.layout import ShardLayout
from memcore.model import UserKey
from memcore.ports import EventArchive
from memcore.settings import Settings

Writing = Callable[[UserKey], AbstractContextManager[Any]]
"""The user's write turn, then the writes gate (yields the write's number)."""
Freeze = Callable[[], AbstractContextManager[Any]]
"""Close the writes gate until no write is under way (a generation switch, a compaction)."""


@dataclass(frozen=True)
class ShardContext:
    layout: ShardLayout
    current: CurrentService
    archive: EventArchive
    writing: Writing
    freeze: Freeze

    @property
    def settings(self) -> Settings:
        return self.layout.settings

    @property
    def shard(self) -> int:
        return self.layout.shard
