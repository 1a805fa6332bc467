"""What every part of one shard shares, handed to each in one frozen object (:class:`ShardContext`): the
settings, the shard's layout, the service it serves from, its event archive, and the two ways into its
writes gate (:class:`actors.write_gate.WriteGate`). The parts (extraction jobs, generations, erasure,
maintenance) derive from :class:`ShardPart`, which reads them from the context under one set of names."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from actors.current import CurrentService
from memcore.archive_ports import EventArchive
from memcore.layout import ShardLayout
from memcore.model import UserKey
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


class ShardPart:
    def __init__(self, ctx: ShardContext) -> None:
        self.ctx = ctx

    @property
    def layout(self) -> ShardLayout:
        return self.ctx.layout

    @property
    def settings(self) -> Settings:
        return self.ctx.settings

    @property
    def shard(self) -> int:
        return self.ctx.shard

    @property
    def archive(self) -> EventArchive:
        return self.ctx.archive

    @property
    def served(self) -> CurrentService:
        """The owner of the service the shard serves from now."""
        return self.ctx.current
