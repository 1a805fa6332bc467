"""The archive's tables (``archive.sqlite3``) and the migrations of files written by older versions.

- ``events``: raw user/assistant text turns, keyed by (app, user, session, id), with an arrival number
  ``seq`` (file-wide, increasing, never reused: ``counters``), an ``extracted`` flag and the state
  ``hidden`` (:data:`memcore.stores.archive_codec.HIDDEN_CODES`); ``events_fts`` is an FTS5 index over
  :func:`memcore.text.tokenize` tokens with a per-user scope token, for session recall;
- ``sessions``: each session's cursor ``last_extract_us`` and its external-context mark;
- ``jobs``: one row per ingest; ``access``: last read time of entries;
- ``graph_entities`` / ``graph_aliases`` / ``graph_facts``: the knowledge graph (:mod:`memcore.graph`), fact
  versions keyed by version id with their line ``fact_id`` (``ended_by``: the line whose supersede ended a
  version); ``diary``: agent diary entries.

Every table is created with ``IF NOT EXISTS`` when a file is opened, so an archive written before a table
existed gets it on its next open (the migration of those files is that).
"""

from __future__ import annotations

from memcore.stores.sqlite_archive.database import Database

SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL, id TEXT NOT NULL,
    role TEXT NOT NULL, content TEXT NOT NULL, ts_us INTEGER NOT NULL,
    external_context INTEGER NOT NULL DEFAULT 0, seq INTEGER, extracted INTEGER NOT NULL DEFAULT 0,
    hidden INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (app, user, session, id)
);
CREATE INDEX IF NOT EXISTS events_by_time ON events (app, user, session, ts_us);
CREATE INDEX IF NOT EXISTS events_unextracted ON events (ts_us) WHERE extracted = 0;
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS events_fts USING fts5 (scope, tokens);
CREATE TABLE IF NOT EXISTS sessions (
    app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL,
    last_extract_us INTEGER, external_context INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL,
    PRIMARY KEY (app, user, session)
);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE, app TEXT NOT NULL, user TEXT NOT NULL, session TEXT NOT NULL,
    status TEXT NOT NULL, upto_us INTEGER, created_at REAL NOT NULL, started_at REAL, finished_at REAL,
    sync INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, reason TEXT, result TEXT,
    cursor_us INTEGER, upto_seq INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs (status, seq);
CREATE INDEX IF NOT EXISTS jobs_by_session ON jobs (app, user, session, status);
CREATE INDEX IF NOT EXISTS events_pending ON events (app, user, session, extracted, seq);
CREATE TABLE IF NOT EXISTS access (
    app TEXT NOT NULL, user TEXT NOT NULL, entry_id TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (app, user, entry_id)
);
CREATE TABLE IF NOT EXISTS graph_entities (
    app TEXT NOT NULL, user TEXT NOT NULL, key TEXT NOT NULL, name TEXT NOT NULL, type TEXT,
    aliases TEXT NOT NULL DEFAULT '[]',
    PRIMARY KEY (app, user, key)
);
CREATE TABLE IF NOT EXISTS graph_aliases (
    app TEXT NOT NULL, user TEXT NOT NULL, alias TEXT NOT NULL, entity TEXT NOT NULL,
    PRIMARY KEY (app, user, alias)
);
CREATE INDEX IF NOT EXISTS graph_aliases_by_entity ON graph_aliases (app, user, entity);
CREATE TABLE IF NOT EXISTS graph_facts (
    app TEXT NOT NULL, user TEXT NOT NULL, id TEXT NOT NULL, fact_id TEXT NOT NULL,
    subject TEXT NOT NULL, subject_name TEXT NOT NULL, predicate TEXT NOT NULL,
    object TEXT NOT NULL, object_name TEXT NOT NULL,
    valid_from_us INTEGER, valid_to_us INTEGER, recorded_us INTEGER NOT NULL, retired_us INTEGER,
    confidence REAL NOT NULL, memories TEXT NOT NULL, turns TEXT NOT NULL, source TEXT, writer TEXT NOT NULL,
    ended_by TEXT,
    PRIMARY KEY (app, user, id)
);
CREATE INDEX IF NOT EXISTS graph_facts_by_subject ON graph_facts (app, user, subject, predicate);
CREATE INDEX IF NOT EXISTS graph_facts_by_object ON graph_facts (app, user, object);
CREATE INDEX IF NOT EXISTS graph_facts_by_line ON graph_facts (app, user, fact_id);
CREATE TABLE IF NOT EXISTS diary (
    app TEXT NOT NULL, user TEXT NOT NULL, id TEXT NOT NULL, agent TEXT NOT NULL, text TEXT NOT NULL,
    topic TEXT NOT NULL, wing TEXT, written_us INTEGER NOT NULL,
    PRIMARY KEY (app, user, id)
);
CREATE INDEX IF NOT EXISTS diary_by_agent ON diary (app, user, agent, written_us);
"""

USER_TABLES = ("events", "sessions", "jobs", "access", "graph_facts", "graph_entities", "graph_aliases", "diary")
"""The tables with rows of a user (what erasing the user empties)."""


def migrate(db: Database) -> None:
    """Archives written before arrival numbers: number their turns by insertion order, mark the turns at
    or before each session's cursor as extracted; before soft deletes: add ``hidden``; jobs get
    ``upto_seq``; fact versions get ``ended_by`` (none: an end written before it names no supersede)."""
    events = db.columns("events")
    if events and "seq" not in events:
        db.script(
            "BEGIN; ALTER TABLE events ADD COLUMN seq INTEGER;"
            " ALTER TABLE events ADD COLUMN extracted INTEGER NOT NULL DEFAULT 0;"
            " UPDATE events SET seq = rowid;"
            " UPDATE events SET extracted = 1 WHERE ts_us <= coalesce((SELECT last_extract_us FROM sessions s"
            " WHERE s.app = events.app AND s.user = events.user AND s.session = events.session), -1);"
            " CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);"
            " INSERT OR REPLACE INTO counters VALUES ('event_seq', (SELECT coalesce(max(seq), 0) FROM events));"
            " COMMIT;")
    if events and "hidden" not in db.columns("events"):
        db.script("ALTER TABLE events ADD COLUMN hidden INTEGER NOT NULL DEFAULT 0")
    jobs = db.columns("jobs")
    if jobs and "upto_seq" not in jobs:
        db.script("ALTER TABLE jobs ADD COLUMN upto_seq INTEGER")
    facts = db.columns("graph_facts")
    if facts and "ended_by" not in facts:
        db.script("ALTER TABLE graph_facts ADD COLUMN ended_by TEXT")


def open_archive_db(db: Database) -> Database:
    migrate(db)
    db.script(SCHEMA)
    return db
