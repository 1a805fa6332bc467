"""The re-extraction job: the event archive → a new generation of memories, then one switch.

Steps (the shard side is :mod:`actors.generations`):

1. pick generation N = 1 + the highest generation any shard has (serving, kept or left over);
2. every shard opens staging generation N and seeds it with what is not re-extracted
   (other users' entries, and the chosen users' entries without provenance);
3. a Ray Data fan-out over the chosen (app, user) pairs — ``concurrency`` at a time — asks each
   user's shard to replay the user's archived sessions, oldest first, through the new
   extractor and policy into generation N (the LLM calls run in the shard's threads, the
   existing-memory search sees generation N, exactly as live extraction would);
4. only when every user succeeded, each shard switches: writes are held for a moment, what
   was written meanwhile is carried over, the ``current`` pointer file is replaced atomically
   and reads move to generation N. A user lives on one shard, so every read of a user sees one
   generation. Qdrant server: afterwards the alias ``<collection>`` points at ``<collection>_gN``
   (after the first re-extraction the real collection of generation 1 still holds that name: the
   alias is created when ``--drop-generation 1`` deletes it). Shards without a pointer file follow it.

Any failure before the switch aborts generation N on every shard (reads never left the old
one); a failure during the switch switches the shards already moved back. The old generation
stays until ``memctl reextract --drop-generation M``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from actors.shard_client import SyncShardClient
from jobs.common import cluster_shards, named, progress, stats_actor
from memcore import factory, layout
from memcore.model import UserKey
from memcore.settings import ExtractorSettings, Settings

COUNTS = ("sessions", "events", "operations", "applied", "skipped", "failed", "rejected", "facts")
"""What each user's replay reports (``facts``: fact operations proposed, held until the switch)."""


@dataclass
class ReextractOptions:
    apps: list[str] = field(default_factory=list)
    users: list[str] = field(default_factory=list)
    extractor: ExtractorSettings | None = None
    """The extractor and policy of the new generation (default: the settings' extractor section)."""
    concurrency: int = 4
    progress_s: float = 10.0


@dataclass
class ReextractSummary:
    generation: int = 0
    previous: dict[int, int] = field(default_factory=dict)
    users: int = 0
    copied: int = 0
    caught_up: int = 0
    facts_applied: int = 0
    """Fact operations the replays proposed that changed the graph at the switch (the rest were known already)."""
    counts: dict[str, int] = field(default_factory=dict)
    switched: bool = False
    alias: str | None = None
    error: str | None = None
    wall_s: float = 0.0
    failures: list[dict[str, Any]] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.switched and self.error is None

    def render(self) -> str:
        state = (f"reads switched to generation {self.generation}" if self.switched
                 else f"generation {self.generation} aborted, reads stay on {sorted(set(self.previous.values()))}")
        c = self.counts
        return (f"reextract: {state}; {self.users} users, {c.get('sessions', 0)} sessions, {c.get('events', 0)} "
                f"turns, {c.get('applied', 0)} operations applied ({c.get('skipped', 0)} skipped, "
                f"{c.get('failed', 0)} failed), {self.copied} entries carried over (+{self.caught_up} at the switch),"
                f" {self.facts_applied} of {c.get('facts', 0)} fact operations applied at the switch,"
                f" {self.wall_s:.1f} s" + (f"; error: {self.error}" if self.error else ""))


class ReextractUser:
    """Ray Data task function: one (shard, app, user) row → the shard's replay of that user."""

    def __init__(self, settings: Settings, generation: int, extractor: dict[str, Any], stats: Any) -> None:
        self.settings = settings
        self.generation = generation
        self.extractor = extractor
        self.stats = stats
        self._shards: SyncShardClient | None = None

    def __call__(self, row: dict[str, Any]) -> dict[str, Any]:
        key = UserKey(app=row["app"], user=row["user"])
        out: dict[str, Any] = {"app": key.app, "user": key.user, "error": "", **dict.fromkeys(COUNTS, 0)}
        try:
            self._shards = self._shards or cluster_shards(self.settings)
            done = self._shards.reextract_user(int(row["shard"]), self.generation, key, self.extractor)
            out.update({k: int(done.get(k, 0)) for k in COUNTS})
        except Exception as exc:  # noqa: BLE001 - reported; the run aborts
            cause = getattr(exc, "cause", None) or exc  # a RayTaskError carries the shard's exception
            out["error"] = f"{type(cause).__name__}: {cause}"[:2000]
        self.stats.add.remote({"users_done": 1, "events": out["events"], "users_failed": int(bool(out["error"]))})
        return out


def run_reextract(settings: Settings, options: ReextractOptions | None = None, *,
                  log: Callable[[str], None] = print) -> ReextractSummary:
    """Re-extract the chosen users into a new generation and switch to it (see the module docstring)."""
    import ray

    options = options or ReextractOptions()
    cfg = options.extractor or settings.extractor
    t0 = time.monotonic()
    shards = cluster_shards(settings)
    infos = [shards.generation_info(k) for k in shards.shards]
    summary = ReextractSummary(previous={i["shard"]: i["current"] for i in infos})
    gen = summary.generation = 1 + max(max([i["current"], *i["generations"]]) for i in infos)
    log(f"reextract: building generation {gen} on {len(shards.shards)} shards "
        f"(apps {options.apps or 'all'}, users {options.users or 'all'}, "
        f"extractor {'LLM ' + str(cfg.model) if cfg.base_url else 'verbatim/' + cfg.granularity}, policy {cfg.policy})")
    begun: list[int] = []
    switched: list[int] = []
    stats = stats_actor("reextract", settings.namespace)
    try:
        _server_collection(settings, gen, "delete")
        for k in shards.shards:  # one by one: a failure leaves the rest untouched
            result = shards.begin_generation(k, gen, list(options.apps), list(options.users))
            begun.append(k)
            summary.copied += int(result["copied"])
            summary.users += len(result["users"])
            result["pairs"] = [{"shard": k, "app": a, "user": u} for a, u in result["users"]]
            infos[k]["pairs"] = result["pairs"]
        pairs = [p for i in infos for p in i.get("pairs", [])]
        task = ReextractUser(settings, gen, cfg.model_dump(), stats)
        counts = dict.fromkeys(COUNTS, 0)

        def render(snap: dict[str, Any]) -> str:
            c = snap["counts"]
            return (f"reextract [{snap['elapsed_s']:.0f}s]: {c.get('users_done', 0)}/{len(pairs)} users, "
                    f"{c.get('events', 0)} turns replayed, {c.get('users_failed', 0)} failed")

        with progress(stats, render, log, options.progress_s):
            if pairs:
                pool = ray.data.TaskPoolStrategy(size=max(1, options.concurrency))
                ds = ray.data.from_items(pairs).map(named(task, "reextract_user"), compute=pool, num_cpus=0.1)
                for row in ds.iter_rows():
                    if row["error"]:
                        summary.failures.append({"source": f"{row['app']}/{row['user']}", "error": row["error"]})
                        break
                    for name in COUNTS:
                        counts[name] += int(row[name])
        summary.counts = counts
        if summary.failures:
            raise RuntimeError(f"re-extraction of {summary.failures[0]['source']} failed: "
                               f"{summary.failures[0]['error']}")
        for k in shards.shards:
            result = shards.switch_generation(k, gen)
            switched.append(k)
            summary.caught_up += int(result["caught_up"])
            summary.facts_applied += int(result.get("facts_applied", 0))
        summary.switched = True
    except Exception as exc:  # noqa: BLE001 - rolled back below, reported in the summary
        summary.error = f"{type(exc).__name__}: {str(exc)[:2000]}"
        _rollback(settings, shards, gen, summary.previous, begun, switched, log)
        summary.switched = False
    if summary.switched:
        try:
            summary.alias = _server_collection(settings, gen, "alias")
        except Exception as exc:  # noqa: BLE001 - the shards serve the new collection by name anyway
            log(f"reextract: alias not switched ({type(exc).__name__}: {exc}); "
                "drop generation 1 to free the collection name for the alias")
    summary.wall_s = time.monotonic() - t0
    ray.get(stats.finish.remote("ok" if summary.switched else "failed", summary.wall_s))
    log(summary.render())
    return summary


def _rollback(settings: Settings, shards: SyncShardClient, gen: int, previous: dict[int, int], begun: list[int],
              switched: list[int], log: Callable[[str], None]) -> None:
    for k in begun:
        try:
            if k in switched:
                shards.switch_generation(k, previous[k])
                shards.drop_generation(k, gen)
            else:
                shards.abort_generation(k, gen)
        except Exception as exc:  # noqa: BLE001 - keep rolling back the other shards
            log(f"reextract: rollback of shard {k} failed: {type(exc).__name__}: {exc}")
    try:
        _server_collection(settings, gen, "delete")
    except Exception as exc:  # noqa: BLE001
        log(f"reextract: could not delete the server collection of generation {gen}: {exc}")


def run_drop(settings: Settings, generation: int, *, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Delete generation ``generation`` on every shard (refused where it is the one served); Qdrant server:
    dropping generation 1 frees the collection name, and the alias then points at the generation served."""
    shards = cluster_shards(settings)
    current = {shards.generation_info(k)["current"] for k in shards.shards}
    if generation in current:
        raise ValueError(f"generation {generation} is being served; switch away from it first")
    results = [shards.drop_generation(k, generation) for k in shards.shards]
    _server_collection(settings, generation, "drop")
    log(f"reextract: dropped generation {generation} on {sum(bool(r['removed']) for r in results)} shards")
    if generation == 1 and len(current) == 1:  # server: the collection name is free for the alias now
        alias = _server_collection(settings, current.pop(), "alias")
        if alias:
            log(f"reextract: alias {alias}")
    return results


def generations(settings: Settings) -> list[dict[str, Any]]:
    """Every shard's serving and stored generations."""
    shards = cluster_shards(settings)
    return [shards.generation_info(k) for k in shards.shards]


def _server_collection(settings: Settings, generation: int, action: str) -> str | None:
    """Qdrant server only: ``delete`` a leftover collection of ``generation`` (never generation 1), ``drop``
    an old generation's collection (generation 1: the real collection that held the alias's name),
    or point the ``alias`` at it."""
    vs = settings.vector_store
    if vs.backend != "server" or not vs.url:
        return None
    from memcore.stores.qdrant import alias_target, switch_alias

    name = layout.generation_collection(vs.collection, generation)
    with factory.server_client(settings) as client:
        if action in ("delete", "drop"):
            if (generation > 1 or action == "drop") and alias_target(client, name) is None \
                    and client.collection_exists(name):
                client.delete_collection(name)
            return None
        switch_alias(client, vs.collection, name)
        return f"{vs.collection} -> {name}"
