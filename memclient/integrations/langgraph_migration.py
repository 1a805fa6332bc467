"""Moving LangGraph items stored before the user label rule to where :class:`MemclusterStore` looks now.

Before ``user_from`` (``docs/identity.md``, "LangGraph item"), the store took the namespace's first
label (after the app label, without ``app``) as the memcluster user and the remaining labels as the
item path: every item of LangGraph's ``("memories", user_id)`` sits in one memcluster user named
``memories`` with the caller key ``[user_id, ..., key]``, where the store no longer looks and which
erasing ``user_id`` leaves. Run once per app, after upgrading::

    from memclient.integrations.langgraph_migration import migrate_legacy_items

    report = migrate_legacy_items(store)      # or: await amigrate_legacy_items(store)

For each item the store wrote in one of ``users`` (by default the memcluster users named like a
collection label, :data:`memclient.integrations.langgraph.COLLECTIONS`), the namespace the old rule
read it as, ``(user, *path)``, is mapped by the store's current rule (its ``user_from``); an item whose
place differs is written there (the same value, text, topics, metadata and remaining expiry; its
``created_at`` becomes the time of the move) and then hard-deleted from the old user. Writing comes
before deleting, so a stop loses nothing, and a re-run skips what was moved: an item already at its new
place (a run stopped between the two steps, or a ``put`` since the upgrade) is kept as it is, and only
the old copy is deleted. The public client API does all of it (read, add, delete); nothing of the
server is imported.

Left in place, and counted: items whose place is the same under both rules (``current``) and items
whose namespace names no user under the current rule (``unmapped``: every label a collection name, such
as ``("memories",)``; a ``MemclusterStore(..., user_from=0)`` still reads them). A user holding more than
:data:`memclient.integrations.langgraph.READ_LIMIT` items that are left in place may hide items behind
them; ``complete`` is False then.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from memclient.integrations.extras import require

require("langgraph")

from langgraph.store.base import InvalidNamespaceError, PutOp  # noqa: E402

from memclient import Entry, NotFound  # noqa: E402
from memclient.integrations.langgraph import (  # noqa: E402
    COLLECTIONS,
    KEY,
    MARK,
    PREFIX,
    READ_LIMIT,
    TTL,
    MemclusterStore,
    Scope,
)
from memclient.integrations.langgraph_values import value_of  # noqa: E402

__all__ = ["MigrationReport", "Move", "amigrate_legacy_items", "legacy_namespace", "migrate_legacy_items", "move_args",
           "plan"]


@dataclass
class MigrationReport:
    """What one run did, in items the store wrote (entries without the store's mark are never touched)."""

    scanned: int = 0
    migrated: int = 0
    """Written at their new place, then deleted from the old user."""
    superseded: int = 0
    """Their new place already held the item (kept as it is); the old copy was deleted."""
    current: int = 0
    """Already where the current rule puts them; left alone."""
    unmapped: int = 0
    """Their namespace names no user under the current rule; left in place."""
    expired: int = 0
    """Expired while being moved; left for the server's sweep."""
    complete: bool = True
    """False when a user held more items left in place than one read returns (run again after moving them)."""
    users: list[str] = field(default_factory=list)
    """The memcluster users that were scanned."""


@dataclass(frozen=True)
class Move:
    """One item of the old rule and the place the current rule gives it."""

    old: Entry
    scope: Scope
    key: str


def legacy_namespace(store: MemclusterStore, app: str, user: str, entry: Entry) -> tuple[str, ...]:
    """The namespace the old rule gave ``entry`` of memcluster ``user``: the user was the first label."""
    labels = (user, *store.path_of(entry))
    return labels if store.app is not None else (app, *labels)


def plan(store: MemclusterStore, app: str, user: str, entry: Entry) -> Move | str:
    """Where ``entry`` (an item the store wrote in ``user``) goes, or why it stays: ``current`` or
    ``unmapped``."""
    path = store.path_of(entry)
    try:
        scope = store.scope(legacy_namespace(store, app, user, entry))
    except InvalidNamespaceError:
        return "unmapped"
    if (scope.app, scope.user, scope.path) == (app, user, path):
        return "current"
    return Move(entry, scope, str(entry.metadata[KEY]))


def move_args(store: MemclusterStore, move: Move, now: datetime) -> dict[str, Any] | None:
    """The ``add`` that writes ``move`` at its new place (None when the item has expired meanwhile)."""
    old = move.old
    remaining = None if old.expires_at is None else (old.expires_at - now).total_seconds()
    if remaining is not None and remaining <= 0:
        return None
    minutes = old.metadata.get(TTL)
    ttl = minutes if isinstance(minutes, int | float) and not isinstance(minutes, bool) else None
    op = PutOp(namespace=store.namespace(move.scope, move.scope.path), key=move.key,
               value=value_of(old), ttl=ttl)
    args = store.write_args(move.scope, op)
    kept = {k: v for k, v in old.metadata.items() if not k.startswith(PREFIX)}
    args.update(text=old.text, metadata={**kept, **args["metadata"]}, ttl_s=remaining, topics=old.topics,
                kind=old.kind, event_time=old.event_time, participants=old.participants, location=old.location,
                source=old.source, provenance=old.provenance or None)
    return args


def _target(app: str | None, store: MemclusterStore, users: Iterable[str] | None) -> tuple[str, list[str]]:
    chosen = app if app is not None else store.app
    if chosen is None:
        raise ValueError("migrate_legacy_items needs the app: this store has none (pass app=...)")
    return chosen, sorted(set(users)) if users is not None else sorted(COLLECTIONS)


class _Round:
    """The bookkeeping of one user's reads: which entries were seen, whether anything is left unread."""

    def __init__(self, report: MigrationReport) -> None:
        self.report, self.seen = report, set[str]()

    def fresh(self, store: MemclusterStore, found: Sequence[Entry]) -> list[Entry]:
        new = [e for e in found if store.stored(e) and e.id not in self.seen]
        self.seen.update(e.id for e in new)
        self.report.scanned += len(new)
        if not new and len(found) >= READ_LIMIT:
            self.report.complete = False
        return new

    def left(self, reason: str) -> None:
        setattr(self.report, reason, getattr(self.report, reason) + 1)


def migrate_legacy_items(store: MemclusterStore, *, app: str | None = None,
                         users: Iterable[str] | None = None) -> MigrationReport:
    """Move the items of ``app`` (default: the store's) that the old rule put in ``users`` (default: the
    collection-named users) to their place under the store's rule (the module docstring); idempotent."""
    mc = store.client
    if mc is None:
        raise RuntimeError("this MemclusterStore has no sync MemoryClient (use amigrate_legacy_items)")
    app, names = _target(app, store, users)
    report = MigrationReport(users=names)
    for user in names:
        round_ = _Round(report)
        while True:
            found = mc.read(app, user, READ_LIMIT, metadata_filter={MARK: True})
            batch = round_.fresh(store, found)
            if not batch:
                break
            for entry in batch:
                move = plan(store, app, user, entry)
                if isinstance(move, str):
                    round_.left(move)
                    continue
                there = mc.read(app, move.scope.user, 2, metadata_filter=store.item_filter(move.scope, move.key))
                if any(store.stored(e) for e in there):
                    report.superseded += 1
                else:
                    args = move_args(store, move, datetime.now(UTC))
                    if args is None:
                        report.expired += 1
                        continue
                    mc.add(app, move.scope.user, args.pop("text"), **args)
                    report.migrated += 1
                try:
                    mc.delete(app, user, entry.id, hard=True)
                except NotFound:
                    pass  # another run deleted it meanwhile
            if len(found) < READ_LIMIT:
                break
    return report


async def amigrate_legacy_items(store: MemclusterStore, *, app: str | None = None,
                                users: Iterable[str] | None = None) -> MigrationReport:
    """:func:`migrate_legacy_items` with the store's async client."""
    mc = store.aclient
    if mc is None:
        raise RuntimeError("this MemclusterStore has no AsyncMemoryClient (use migrate_legacy_items)")
    app, names = _target(app, store, users)
    report = MigrationReport(users=names)
    for user in names:
        round_ = _Round(report)
        while True:
            found = await mc.read(app, user, READ_LIMIT, metadata_filter={MARK: True})
            batch = round_.fresh(store, found)
            if not batch:
                break
            for entry in batch:
                move = plan(store, app, user, entry)
                if isinstance(move, str):
                    round_.left(move)
                    continue
                there = await mc.read(app, move.scope.user, 2,
                                      metadata_filter=store.item_filter(move.scope, move.key))
                if any(store.stored(e) for e in there):
                    report.superseded += 1
                else:
                    args = move_args(store, move, datetime.now(UTC))
                    if args is None:
                        report.expired += 1
                        continue
                    await mc.add(app, move.scope.user, args.pop("text"), **args)
                    report.migrated += 1
                try:
                    await mc.delete(app, user, entry.id, hard=True)
                except NotFound:
                    pass  # another run deleted it meanwhile
            if len(found) < READ_LIMIT:
                break
    return report
