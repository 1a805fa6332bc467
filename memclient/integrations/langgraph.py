"""LangGraph long-term memory on memcluster: :class:`MemclusterStore`, a ``langgraph.store.base.BaseStore``.

Install with ``pip install "memcluster-client[langgraph]"``::

    store = MemclusterStore.connect("http://127.0.0.1:8000", api_key="...", app="my-app")
    graph = builder.compile(store=store)          # nodes get ``store`` injected
    store.put(("memories", user_id), str(uuid4()), {"data": "User name is Bob"})   # LangGraph's memory guide
    store.put(("alice", "prefs"), "drink", {"text": "Alice drinks oat-milk flat whites"})

Which label is the user (``user_from``). With ``app`` given the whole namespace is the app's; without
it, its first label names the app. Of the labels after that, the memcluster user is:

- by default, the first label that is not a collection name: leading labels found in
  :data:`COLLECTIONS` (``memories``, ``profile``, ``preferences``, ...) are skipped. So LangGraph's own
  examples work as written: ``("memories", user_id)`` (the memory guide) and ``(user_id, "memories")``
  (the persistence guide) both name the user ``user_id``; ``("alice", "prefs")`` names ``alice``. A
  namespace made only of collection names names no user (:class:`InvalidNamespaceError`);
- with ``user_from=i``, the label at index ``i`` (for a user id that could be a collection name).

Erasure (``DELETE /v1/apps/{app}/users/{user}``), sharding and every read are then per real user.
Every other label, in order, is the item's path; the user's place in it is kept (an empty slot, ``.``
once joined, which no LangGraph label can be), so ``("memories", "alice")`` and ``("alice", "memories")``
stay two namespaces. Each read and write is scoped to that memcluster app and user; the path (possibly
empty) and the item key become the memcluster entry's caller ``key`` (a JSON array ``[*path, key]``),
and the entry's ``metadata`` holds the path prefixes that make namespace-prefix searches one metadata
equality (``lg_p<depth>``, the labels joined by ``.``); search results and gets are also checked against
the namespace itself.

Keys. memcluster's caller key is unique per (app, user); folding the rest of the namespace into it
gives exactly LangGraph's semantics: the same namespace and key are the same JSON array, so ``put``
replaces the item; two namespaces differ in a label or in length, so their arrays differ and the same
key in two namespaces is two items, never one; ``search`` by a namespace prefix and
``list_namespaces`` see only the namespaces under it. The ``.``-joined prefixes are unambiguous
because no label holds a ``.``: ``batch`` and ``abatch`` check every op before running any
(:meth:`MemclusterStore.plan`) by LangGraph's own label rule (``validate_op_namespace``, what ``put``,
``get`` and ``search`` apply: no ``.``, NUL, empty or non-string label), then the user mapping, each
put's value and each search filter; a refused batch reads and writes nothing.

- ``put``: the entry's text (what search ranks) is the value's string fields, or only the fields named
  by ``index`` / ``index_fields``. A value whose JSON is at most 1 KB (nesting at most 3 deep) is kept
  whole in the entry's ``metadata`` (``value``); a larger one (long strings, deep nesting) as JSON in the
  entry's text (:mod:`memclient.integrations.langgraph_values`). So values work up to memcluster's memory
  text limit, 8192 bytes of UTF-8 (the indexed text included); a larger value, or one JSON cannot hold,
  is refused (``ValueError`` / ``TypeError``) before anything is written.
- ``search(prefix, query=...)``: LangGraph's vector search: a dense memcluster search with no floor;
  :class:`SearchItem` ``score`` is the hit's relevance (the cosine of the query's and the item's
  embedding, -1..1, less the server's penalty for the query's names the item lacks; ``SearchHit.relevance``),
  best first; items put with ``index=False`` come after the
  scored ones with ``score`` None. Without ``query`` the newest items first. ``filter`` is LangGraph's
  filter language (:mod:`memclient.integrations.langgraph_filter`: equality, nested objects, lists,
  ``$eq``, ``$ne``, ``$gt``, ``$gte``, ``$lt``, ``$lte``, dotted paths), applied in the client to the
  items of the namespace prefix (up to :data:`READ_LIMIT` of them).
- ``list_namespaces`` and ``search`` need a prefix that names the app and user (memcluster has no
  cross-user listing: ``list_namespaces()``, a suffix-only listing or ``search(())`` are refused).
- One vector per item: the indexed fields are embedded joined, as one memory text (LangGraph embeds
  each field path apart and scores an item by its best field).
- TTL (``supports_ttl`` is True): ``put(..., ttl=minutes)`` becomes the entry's ``ttl_s`` (minutes x 60),
  so the item expires that long after the write: no get, search or listing returns it afterwards and
  the server's maintenance sweep deletes it (there is no client-side sweeper; ``ttl_config``'s
  ``sweep_interval_minutes`` is the server's ``ttl.sweep_s``). ``ttl=None`` (or no ``default_ttl``):
  the item never expires; a ``put`` replaces the previous expiry. ``refresh_ttl`` on get and search
  (LangGraph's default, or ``ttl_config["refresh_on_read"]``) restarts the TTL of each returned item
  that has one by writing it again unchanged (one write per item, which also moves its
  ``updated_at``). The server's per-app TTL (``ttl`` in its settings) applies on top.

Errors of the service are raised as :class:`memclient.MemclientError` subclasses, never turned into
empty results: a ``BaseStore`` is a storage API, and LangGraph's own stores raise too (a ``get`` that
answered None for an item it could not read would let the next ``put`` overwrite it; a node fails and
the node's ``RetryPolicy`` may run it again). "Memory never blocks the model" (:mod:`memclient.guard`)
applies to what is built on the store for the model: a node's memory read through
:func:`memclient.guard.read_or_sync` (memory down: no memory, a warning), a tool through
:func:`memclient.guard.safe_tool` (the error as the tool's result; LangGraph's ``ToolNode`` re-raises
other exceptions by default), as ``examples/langgraph_memory.py`` does. ``batch`` uses the sync client,
``abatch`` the async one (``connect`` makes both).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from memclient.integrations.extras import require

require("langgraph")

from langgraph.store.base import (  # noqa: E402
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    validate_op_namespace,
)

from memclient import AsyncMemoryClient, Entry, MemoryClient, SearchHit  # noqa: E402
from memclient.integrations.langgraph_filter import check_filter, matches  # noqa: E402
from memclient.integrations.langgraph_values import encode_value, value_of  # noqa: E402

__all__ = ["COLLECTIONS", "MemclusterStore"]

MARK = "lg"  # metadata flag of entries written by the store
DEPTH, KEY, PREFIX, TTL = "lg_depth", "lg_key", "lg_p", "lg_ttl"
#: metadata: False for an item put with ``index=False`` (search returns it unscored, after the scored ones)
INDEXED = "lg_ix"
#: the most entries one listing reads (the server's read limit)
READ_LIMIT = 1000
#: the most entries a get reads for one (namespace, key): one, plus any older entry of the same key
FIND_LIMIT = 4
#: collection labels that precede the user id in LangGraph's examples (``("memories", user_id)``)
COLLECTIONS = frozenset({"memories", "memory", "user_memories", "profile", "profiles", "preferences", "facts",
                         "episodes", "instructions", "procedures"})
#: the user's place in an item's path when other labels precede it (no LangGraph label is "." or holds one)
USER_SLOT = "."


@dataclass(frozen=True)
class Scope:
    app: str
    user: str
    path: tuple[str, ...]
    """The namespace's other labels; :data:`USER_SLOT` where the user stood when labels precede it."""


@dataclass(frozen=True)
class Step:
    """One checked operation of a batch (:meth:`MemclusterStore.plan`)."""

    op: Op
    scope: Scope
    write: Mapping[str, Any] | None = None
    """A put's ``add`` arguments (None: not a put, or a delete)."""


def _prefixes(path: Sequence[str]) -> dict[str, str]:
    return {f"{PREFIX}{i}": ".".join(path[:i]) for i in range(1, len(path) + 1)}


def _seconds(minutes: float | None) -> float | None:
    """LangGraph's TTL (minutes) as memcluster's ``ttl_s``."""
    return None if minutes is None else float(minutes) * 60.0


def _does_match(cond: MatchCondition, ns: tuple[str, ...]) -> bool:
    path = tuple(cond.path)
    if len(ns) < len(path):
        return False
    pairs = zip(ns, path, strict=False) if cond.match_type == "prefix" else zip(reversed(ns), reversed(path),
                                                                                   strict=False)
    return all(p == "*" or a == p for a, p in pairs)


class MemclusterStore(BaseStore):
    """A LangGraph store backed by memcluster (see the module docstring for the mapping)."""

    supports_ttl = True

    def __init__(
        self,
        client: MemoryClient | None = None,
        aclient: AsyncMemoryClient | None = None,
        *,
        app: str | None = None,
        index_fields: Sequence[str] | None = None,
        user_from: int | None = None,
    ) -> None:
        """``user_from``: the index of the user label (after the app label when ``app`` is None); None:
        the first label not in :data:`COLLECTIONS` (the module docstring)."""
        if client is None and aclient is None:
            raise ValueError("MemclusterStore needs a MemoryClient, an AsyncMemoryClient or both")
        if user_from is not None and (isinstance(user_from, bool) or not isinstance(user_from, int) or user_from < 0):
            raise ValueError(f"user_from is the index of the user label (0 or more); got {user_from!r}")
        self.client, self.aclient, self.app, self.user_from = client, aclient, app, user_from
        self.index_fields = list(index_fields) if index_fields is not None else None

    @classmethod
    def connect(cls, base_url: str, api_key: str | None = None, *, app: str | None = None,
                timeout: float = 10.0, index_fields: Sequence[str] | None = None,
                user_from: int | None = None) -> MemclusterStore:
        """A store with a sync and an async client of ``base_url`` (close with :meth:`close` / :meth:`aclose`)."""
        return cls(MemoryClient(base_url, api_key=api_key, timeout=timeout),
                   AsyncMemoryClient(base_url, api_key=api_key, timeout=timeout), app=app, index_fields=index_fields,
                   user_from=user_from)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()

    async def aclose(self) -> None:
        self.close()
        if self.aclient is not None:
            await self.aclient.close()

    # ------------------------------------------------------------------ mapping
    def scope(self, namespace: Sequence[str]) -> Scope:
        ns = tuple(namespace)
        need = 1 if self.app is not None else 2
        if len(ns) < need:
            what = "(..., user, ...)" if self.app is not None else "(app, ..., user, ...)"
            raise InvalidNamespaceError(f"a memcluster namespace is {what}; got {ns!r}")
        app, labels = (self.app, ns) if self.app is not None else (ns[0], ns[1:])
        at = self.user_index(ns, labels)
        path = labels[1:] if at == 0 else (*labels[:at], USER_SLOT, *labels[at + 1:])
        return Scope(app, labels[at], path)

    def user_index(self, ns: tuple[str, ...], labels: tuple[str, ...]) -> int:
        """Where the user label is among ``labels`` (the namespace after its app label, if any)."""
        if self.user_from is not None:
            if self.user_from >= len(labels):
                raise InvalidNamespaceError(f"user_from={self.user_from}, but namespace {ns!r} has no label there")
            return self.user_from
        for i, label in enumerate(labels):
            if label not in COLLECTIONS:
                return i
        raise InvalidNamespaceError(f"namespace {ns!r} names no user: every label is a collection name "
                                    f"({', '.join(sorted(COLLECTIONS))}); add the user id, or set user_from")

    def namespace(self, scope: Scope, path: Sequence[str]) -> tuple[str, ...]:
        labels = (tuple(scope.user if label == USER_SLOT else label for label in path) if USER_SLOT in path
                  else (scope.user, *path))
        return labels if self.app is not None else (scope.app, *labels)

    @staticmethod
    def prefix_filter(path: Sequence[str], **extra: Any) -> dict[str, Any]:
        return {MARK: True, **({f"{PREFIX}{len(path)}": ".".join(path)} if path else {}), **extra}

    def item_filter(self, scope: Scope, key: str) -> dict[str, Any]:
        return self.prefix_filter(scope.path, **{DEPTH: len(scope.path), KEY: key})

    def write_args(self, scope: Scope, op: PutOp) -> dict[str, Any]:
        """The ``add`` arguments of a put (:func:`encode_value` refuses a value memcluster cannot keep)."""
        if not isinstance(op.value, Mapping):
            raise TypeError(f"an item value is a dict; got {type(op.value).__name__} for item {op.key!r}")
        fields = None if op.index is None else ([] if op.index is False else list(op.index))
        if fields is None:
            fields = self.index_fields
        text, stored = encode_value(op.value, fields, op.key)
        meta = {MARK: True, DEPTH: len(scope.path), KEY: op.key, **_prefixes(scope.path), **stored}
        if op.index is False:
            meta[INDEXED] = False
        if op.ttl is not None:
            meta[TTL] = op.ttl
        return {"text": text, "key": json.dumps([*scope.path, op.key], ensure_ascii=False),
                "metadata": meta, "source": "user", "ttl_s": _seconds(op.ttl)}

    @staticmethod
    def refresh_args(entry: Entry) -> dict[str, Any] | None:
        """The write that restarts ``entry``'s TTL (the same item again), or None when it has no TTL."""
        minutes = entry.metadata.get(TTL)
        if not isinstance(minutes, int | float) or isinstance(minutes, bool) or entry.expires_at is None:
            return None
        return {"text": entry.text, "key": entry.key, "metadata": entry.metadata, "source": "user",
                "ttl_s": _seconds(minutes)}

    def item(self, scope: Scope, entry: Entry, score: float | None = None, *, search: bool = False) -> Item:
        meta = entry.metadata
        namespace = self._namespace_of(scope, entry)
        key, value = str(meta.get(KEY, "")), value_of(entry)
        if search:
            return SearchItem(namespace=namespace, key=key, value=value, created_at=entry.created_at,
                              updated_at=entry.updated_at, score=score)
        return Item(namespace=namespace, key=key, value=value, created_at=entry.created_at,
                    updated_at=entry.updated_at)

    @staticmethod
    def stored(entry: Entry) -> bool:
        """Whether ``entry`` is an item this store wrote (its mark, caller key and item key)."""
        return entry.metadata.get(MARK) is True and entry.key is not None and KEY in entry.metadata

    @staticmethod
    def path_of(entry: Entry) -> tuple[str, ...]:
        """The item path of a stored entry (its caller key without the item key)."""
        return tuple(json.loads(entry.key or "[]")[:-1])

    @staticmethod
    def scored(hits: Sequence[SearchHit]) -> list[tuple[Entry, float | None]]:
        """Search hits as LangGraph ranks them: by ``score``, the hit's relevance (the cosine of the query's
        and the item's embedding less the name penalty, -1..1; the fused score from a server that sends no
        relevance), best first; items put with ``index=False`` unscored (None), after the others."""
        found = [(h.entry, None if h.entry.metadata.get(INDEXED) is False
                  else (h.relevance if h.relevance is not None else h.score)) for h in hits]
        return sorted(found, key=lambda pair: (pair[1] is None, -(pair[1] or 0.0)))

    def page(self, scope: Scope, op: SearchOp, hits: Sequence[SearchHit] | None,
             entries: Sequence[Entry] | None) -> list[tuple[Entry, float | None]]:
        """The entries (and scores) of the search's answer: the store's items under the namespace prefix
        passing ``filter`` (:mod:`memclient.integrations.langgraph_filter`), paged."""
        found = self.scored(hits) if hits is not None else [(e, None) for e in entries or ()]
        prefix = tuple(op.namespace_prefix)
        chosen = [(e, s) for e, s in found
                  if self.stored(e) and self._namespace_of(scope, e)[: len(prefix)] == prefix
                  and matches(value_of(e), op.filter)]
        return chosen[op.offset: op.offset + op.limit]

    def pick(self, scope: Scope, key: str, found: Sequence[Entry]) -> Entry | None:
        """The entry of exactly (namespace, key) among a get's candidates: its whole path, not only the
        ``.``-joined prefix the read filtered on."""
        return next((e for e in found if self.stored(e) and self.path_of(e) == scope.path
                     and e.metadata.get(KEY) == key), None)

    def _namespace_of(self, scope: Scope, entry: Entry) -> tuple[str, ...]:
        return self.namespace(scope, self.path_of(entry))

    def search_items(self, scope: Scope, chosen: Sequence[tuple[Entry, float | None]]) -> list[SearchItem]:
        out = [self.item(scope, e, s, search=True) for e, s in chosen]
        return [i for i in out if isinstance(i, SearchItem)]

    @staticmethod
    def fetch_size(op: SearchOp) -> int:
        """How many hits a query search asks for: the page's end (the cosine order of the first N is the start
        of the whole order), or every item (up to :data:`READ_LIMIT`) when a filter, applied here, may drop
        some."""
        return READ_LIMIT if op.filter else max(1, min(READ_LIMIT, op.offset + op.limit))

    #: the search options of a query: LangGraph's vector search, ranked by cosine (a dense search, with no
    #: floor: -1 is the bottom of the relevance scale), every hit whole, unmerged and undated
    SEARCH_OPTIONS: Mapping[str, Any] = {"hybrid": False, "similarity_threshold": -1.0, "deduplicate": False,
                                         "merge_overlapping": False, "date_boost": False}

    def plan(self, ops: Iterable[Op]) -> list[Step]:
        """Every operation checked before any runs, so that a refused batch reads and writes nothing: the
        namespace labels by LangGraph's own rule (``validate_op_namespace``, what ``put``/``get``/``search``
        apply: no ``.``, no empty or non-string label, so two namespaces never fold into one key), the
        memcluster user and app of each namespace, each put's value (:func:`encode_value`) and each search
        filter (:func:`~memclient.integrations.langgraph_filter.check_filter`)."""
        steps: list[Step] = []
        for op in ops:
            if not isinstance(op, GetOp | PutOp | SearchOp | ListNamespacesOp):
                raise TypeError(f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, GetOp):
                steps.append(Step(op, self.scope(op.namespace)))
            elif isinstance(op, PutOp):
                scope = self.scope(op.namespace)
                steps.append(Step(op, scope, None if op.value is None else self.write_args(scope, op)))
            elif isinstance(op, SearchOp):
                check_filter(op.filter)
                steps.append(Step(op, self.scope(op.namespace_prefix)))
            else:
                steps.append(Step(op, self.list_scope(op)))
        return steps

    def list_scope(self, op: ListNamespacesOp) -> Scope:
        for cond in op.match_conditions or ():
            if cond.match_type == "prefix":
                try:
                    scope = self.scope(cond.path)
                except InvalidNamespaceError:
                    continue
                if "*" not in (scope.app, scope.user):
                    return scope
        raise ValueError("list_namespaces on memcluster needs a prefix naming the app and user "
                         "(memcluster has no cross-user listing)")

    def namespaces(self, scope: Scope, op: ListNamespacesOp, entries: Sequence[Entry]) -> list[tuple[str, ...]]:
        seen: set[tuple[str, ...]] = set()
        for e in entries:
            if self.stored(e):
                ns = self._namespace_of(scope, e)
                if all(_does_match(c, ns) for c in op.match_conditions or ()):
                    seen.add(ns[: op.max_depth] if op.max_depth is not None else ns)
        return sorted(seen)[op.offset: op.offset + op.limit]

    # ------------------------------------------------------------------ sync
    def _sync(self) -> MemoryClient:
        if self.client is None:
            raise RuntimeError("this MemclusterStore has no sync MemoryClient (use the async methods)")
        return self.client

    def _find(self, mc: MemoryClient, scope: Scope, key: str) -> Entry | None:
        return self.pick(scope, key, mc.read(scope.app, scope.user, FIND_LIMIT,
                                             metadata_filter=self.item_filter(scope, key)))

    def _refresh(self, mc: MemoryClient, scope: Scope, entries: Sequence[Entry]) -> list[Entry]:
        out = []
        for entry in entries:
            args = self.refresh_args(entry)
            out.append(entry if args is None else mc.add(scope.app, scope.user, args.pop("text"), **args))
        return out

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        mc = self._sync()
        results: list[Result] = []
        for step in self.plan(ops):
            op, scope = step.op, step.scope
            if isinstance(op, GetOp):
                entry = self._find(mc, scope, op.key)
                if entry is not None and op.refresh_ttl:
                    entry = self._refresh(mc, scope, [entry])[0]
                results.append(self.item(scope, entry) if entry is not None else None)
            elif isinstance(op, PutOp):
                if step.write is None:
                    entry = self._find(mc, scope, op.key)
                    if entry is not None:
                        mc.delete(scope.app, scope.user, entry.id, hard=True)
                else:
                    args = dict(step.write)
                    mc.add(scope.app, scope.user, args.pop("text"), **args)
                results.append(None)
            elif isinstance(op, SearchOp):
                flt = self.prefix_filter(scope.path)
                if op.query:
                    hits = mc.search(scope.app, scope.user, op.query, max_results=self.fetch_size(op),
                                     metadata_filter=flt, **self.SEARCH_OPTIONS)
                    chosen = self.page(scope, op, hits, None)
                else:
                    chosen = self.page(scope, op, None, mc.read(scope.app, scope.user, READ_LIMIT,
                                                                metadata_filter=flt))
                if op.refresh_ttl:
                    fresh = self._refresh(mc, scope, [e for e, _ in chosen])
                    chosen = [(e, sc) for e, (_, sc) in zip(fresh, chosen, strict=True)]
                results.append(self.search_items(scope, chosen))
            else:
                entries = mc.read(scope.app, scope.user, READ_LIMIT, metadata_filter=self.prefix_filter(()))
                results.append(self.namespaces(scope, op, entries))
        return results

    # ------------------------------------------------------------------ async
    def _async(self) -> AsyncMemoryClient:
        if self.aclient is None:
            raise RuntimeError("this MemclusterStore has no AsyncMemoryClient (use the sync methods)")
        return self.aclient

    async def _afind(self, mc: AsyncMemoryClient, scope: Scope, key: str) -> Entry | None:
        return self.pick(scope, key, await mc.read(scope.app, scope.user, FIND_LIMIT,
                                                   metadata_filter=self.item_filter(scope, key)))

    async def _arefresh(self, mc: AsyncMemoryClient, scope: Scope, entries: Sequence[Entry]) -> list[Entry]:
        out = []
        for entry in entries:
            args = self.refresh_args(entry)
            out.append(entry if args is None else await mc.add(scope.app, scope.user, args.pop("text"), **args))
        return out

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        mc = self._async()
        results: list[Result] = []
        for step in self.plan(ops):
            op, scope = step.op, step.scope
            if isinstance(op, GetOp):
                entry = await self._afind(mc, scope, op.key)
                if entry is not None and op.refresh_ttl:
                    entry = (await self._arefresh(mc, scope, [entry]))[0]
                results.append(self.item(scope, entry) if entry is not None else None)
            elif isinstance(op, PutOp):
                if step.write is None:
                    entry = await self._afind(mc, scope, op.key)
                    if entry is not None:
                        await mc.delete(scope.app, scope.user, entry.id, hard=True)
                else:
                    args = dict(step.write)
                    await mc.add(scope.app, scope.user, args.pop("text"), **args)
                results.append(None)
            elif isinstance(op, SearchOp):
                flt = self.prefix_filter(scope.path)
                if op.query:
                    hits = await mc.search(scope.app, scope.user, op.query, max_results=self.fetch_size(op),
                                           metadata_filter=flt, **self.SEARCH_OPTIONS)
                    chosen = self.page(scope, op, hits, None)
                else:
                    chosen = self.page(scope, op, None, await mc.read(scope.app, scope.user, READ_LIMIT,
                                                                      metadata_filter=flt))
                if op.refresh_ttl:
                    fresh = await self._arefresh(mc, scope, [e for e, _ in chosen])
                    chosen = [(e, sc) for e, (_, sc) in zip(fresh, chosen, strict=True)]
                results.append(self.search_items(scope, chosen))
            else:
                entries = await mc.read(scope.app, scope.user, READ_LIMIT, metadata_filter=self.prefix_filter(()))
                results.append(self.namespaces(scope, op, entries))
        return results
