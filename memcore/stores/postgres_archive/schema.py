"""The archive's tables on PostgreSQL, in one schema (``archive.db_schema``) shared by every shard.

Every row is keyed by (app, user) and carries ``route`` (:func:`memcore.ids.route_hash` of its user):
a shard selects its users with ``mod(route, shards) = shard``, so the shard count can change without
moving a row. Text columns compare byte-wise (``COLLATE "C"``, as SQLite does).

- ``events``: raw user/assistant text turns, keyed by (app, user, session, id), with an arrival number
  ``seq`` (an identity column: increasing, never reused), ``extracted`` and the state ``hidden``
  (:data:`memcore.stores.archive_codec.HIDDEN_CODES`); ``tokens`` (:func:`memcore.text.tokenize` of the
  content, CJK characters one by one) and ``ntokens`` are what session recall ranks with BM25
  (:mod:`memcore.stores.postgres_archive.events`);
- ``sessions``: each session's cursor ``last_extract_us`` and its external-context mark;
- ``jobs``: one row per ingest, numbered by ``seq``; ``access``: last read times of entries;
- ``user_seq``: the per-user write counter (kept when a user is erased);
- ``shard_leases``: each shard number's lease epoch (fencing of incarnations,
  :mod:`memcore.stores.postgres_archive.lease`).
- ``graph_entities`` / ``graph_aliases`` / ``graph_facts``: the knowledge graph (:mod:`memcore.graph`), fact
  versions keyed by version id with their line ``fact_id`` (times in microseconds, source lists as JSON
  text, as on SQLite; ``ended_by``, added to older schemas when opened (:data:`_ADDED_COLUMNS`), names the
  line whose supersede ended a version); ``diary``: agent diary entries (:mod:`memcore.stores.postgres_archive.graph`).

No index holds the text (a GIN index would keep erased words: GIN never drops a key), so erasure
needs only the heap rewritten (:meth:`memcore.stores.postgres_archive.PostgresArchive.compact`).
Creation is idempotent (``IF NOT EXISTS``) and serialised by an advisory lock, so shards starting
together do not race. A schema this version already made or migrated is left alone (the table
``schema_digest`` holds :data:`SCHEMA_DIGEST`), so a shard starting while others serve takes no table lock.
"""

from __future__ import annotations

import hashlib

from memcore.stores.postgres_archive.database import Cursor, PgDatabase

_LOCK = 7_455_321_019  # pg_advisory_xact_lock key of schema creation

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    seq bigint GENERATED ALWAYS AS IDENTITY,
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, session text COLLATE "C" NOT NULL,
    id text COLLATE "C" NOT NULL, role text NOT NULL, content text NOT NULL, ts_us bigint NOT NULL,
    external_context boolean NOT NULL DEFAULT false, extracted boolean NOT NULL DEFAULT false,
    hidden smallint NOT NULL DEFAULT 0, route numeric(20, 0) NOT NULL,
    tokens text[] COLLATE "C" NOT NULL, ntokens integer NOT NULL,
    PRIMARY KEY (app, user_id, session, id)
);
CREATE UNIQUE INDEX IF NOT EXISTS events_by_seq ON events (seq);
CREATE INDEX IF NOT EXISTS events_by_time ON events (app, user_id, session, ts_us);
CREATE INDEX IF NOT EXISTS events_pending ON events (app, user_id, session, extracted, seq);
CREATE INDEX IF NOT EXISTS events_unextracted ON events (ts_us) WHERE NOT extracted;
CREATE TABLE IF NOT EXISTS sessions (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, session text COLLATE "C" NOT NULL,
    last_extract_us bigint, external_context boolean NOT NULL DEFAULT false,
    updated_at double precision NOT NULL, route numeric(20, 0) NOT NULL,
    PRIMARY KEY (app, user_id, session)
);
CREATE TABLE IF NOT EXISTS jobs (
    seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    id text COLLATE "C" NOT NULL UNIQUE, app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL,
    session text COLLATE "C" NOT NULL, status text NOT NULL, upto_us bigint,
    created_at double precision NOT NULL, started_at double precision, finished_at double precision,
    sync boolean NOT NULL DEFAULT false, attempts integer NOT NULL DEFAULT 0, reason text, result text,
    cursor_us bigint, upto_seq bigint, route numeric(20, 0) NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, seq);
CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (app, user_id, session, status);
CREATE TABLE IF NOT EXISTS access (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, entry_id text COLLATE "C" NOT NULL,
    at double precision NOT NULL,
    PRIMARY KEY (app, user_id, entry_id)
);
CREATE TABLE IF NOT EXISTS shard_leases (
    shard integer PRIMARY KEY, epoch bigint NOT NULL, holder text NOT NULL, taken_at double precision NOT NULL
);
CREATE TABLE IF NOT EXISTS graph_entities (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, key text COLLATE "C" NOT NULL,
    name text NOT NULL, type text, aliases text NOT NULL DEFAULT '[]', route numeric(20, 0) NOT NULL,
    PRIMARY KEY (app, user_id, key)
);
CREATE TABLE IF NOT EXISTS graph_aliases (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, alias text COLLATE "C" NOT NULL,
    entity text COLLATE "C" NOT NULL, route numeric(20, 0) NOT NULL,
    PRIMARY KEY (app, user_id, alias)
);
CREATE INDEX IF NOT EXISTS graph_aliases_by_entity ON graph_aliases (app, user_id, entity);
CREATE TABLE IF NOT EXISTS graph_facts (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, id text COLLATE "C" NOT NULL,
    fact_id text COLLATE "C" NOT NULL, subject text COLLATE "C" NOT NULL, subject_name text NOT NULL,
    predicate text COLLATE "C" NOT NULL, object text COLLATE "C" NOT NULL, object_name text NOT NULL,
    valid_from_us bigint, valid_to_us bigint, recorded_us bigint NOT NULL, retired_us bigint,
    confidence double precision NOT NULL, memories text NOT NULL, turns text NOT NULL, source text,
    writer text NOT NULL, route numeric(20, 0) NOT NULL, ended_by text COLLATE "C",
    PRIMARY KEY (app, user_id, id)
);
CREATE INDEX IF NOT EXISTS graph_facts_by_subject ON graph_facts (app, user_id, subject, predicate);
CREATE INDEX IF NOT EXISTS graph_facts_by_object ON graph_facts (app, user_id, object);
CREATE INDEX IF NOT EXISTS graph_facts_by_line ON graph_facts (app, user_id, fact_id);
CREATE TABLE IF NOT EXISTS diary (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, id text COLLATE "C" NOT NULL,
    agent text COLLATE "C" NOT NULL, text text NOT NULL, topic text NOT NULL, wing text COLLATE "C",
    written_us bigint NOT NULL, route numeric(20, 0) NOT NULL,
    PRIMARY KEY (app, user_id, id)
);
CREATE INDEX IF NOT EXISTS diary_by_agent ON diary (app, user_id, agent, written_us);
CREATE TABLE IF NOT EXISTS user_seq (
    app text COLLATE "C" NOT NULL, user_id text COLLATE "C" NOT NULL, value bigint NOT NULL,
    PRIMARY KEY (app, user_id)
);
"""

USER_TABLES = ("events", "sessions", "jobs", "access", "graph_facts", "graph_entities", "graph_aliases", "diary")
"""The tables with rows of a user (what erasing the user empties; ``user_seq`` is kept)."""

UNROUTED_TABLES = ("access", "user_seq")
"""The tables of users' rows without a ``route`` column (created before it; a shard selects them by key)."""

TEXT_TABLES = ("events", "jobs", "graph_facts", "graph_entities", "graph_aliases", "diary")
"""The tables that hold a user's text (turn content, recall tokens, a job's result, facts, names, aliases,
diary entries): what a compaction rewrites."""


_ADDED_COLUMNS = {("graph_facts", "ended_by"): 'text COLLATE "C"'}
"""Columns newer than their table: added to a schema made before them when it is opened."""

SCHEMA_DIGEST = hashlib.sha256(repr((SCHEMA, sorted(_ADDED_COLUMNS.items()))).encode()).hexdigest()
"""What the table ``schema_digest`` holds once this version made or migrated the schema: any change to the
statements above changes it, so the next open runs them."""


def create_schema(db: PgDatabase) -> None:
    """Make and migrate the schema, unless this version already did (:data:`SCHEMA_DIGEST`): a shard starting
    while others serve then takes no lock at all. (``CREATE INDEX IF NOT EXISTS`` takes its table's share lock
    before it finds the index, so it waits for the table's open write transactions, and every writer
    that comes after waits for it.)"""
    with db.tx() as cur:
        cur.execute("SELECT to_regclass(%s)", (f'"{db.schema}".schema_digest',))
        row = cur.fetchone()
        if row is not None and row[0] is not None:
            cur.execute(f'SELECT digest FROM "{db.schema}".schema_digest')
            if [r[0] for r in cur.fetchall()] == [SCHEMA_DIGEST]:
                return
    with db.tx() as cur:
        cur.execute(f"SELECT pg_advisory_xact_lock({_LOCK})")
        cur.execute(f'CREATE SCHEMA IF NOT EXISTS "{db.schema}"')
        cur.execute(f'SET LOCAL search_path TO "{db.schema}"')
        cur.execute(SCHEMA)
        _add_missing_columns(cur, db.schema)
        cur.execute("CREATE TABLE IF NOT EXISTS schema_digest (digest text NOT NULL)")
        cur.execute("DELETE FROM schema_digest")
        cur.execute("INSERT INTO schema_digest (digest) VALUES (%s)", (SCHEMA_DIGEST,))


def _add_missing_columns(cur: Cursor, schema: str) -> None:
    """Add the :data:`_ADDED_COLUMNS` a table lacks. Looked up first: ``ALTER TABLE ... ADD COLUMN IF NOT EXISTS``
    takes the table's exclusive lock even when the column exists."""
    for (table, column), kind in _ADDED_COLUMNS.items():
        cur.execute("SELECT 1 FROM information_schema.columns WHERE table_schema = %s AND table_name = %s"
                    " AND column_name = %s", (schema, table, column))
        if cur.fetchone() is None:
            cur.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
