"""The ports of the event archive: what every archive engine implements (SQLite per shard,
:mod:`memcore.stores.sqlite_archive`; PostgreSQL, :mod:`memcore.stores.postgres_archive`), one repository per
kind of record, gathered by :class:`EventArchive`. The vector, keyword, embedder and extractor ports are in
:mod:`memcore.ports`.

Contract shared by both engines (``tests/memcore/stores/test_postgres_archive.py`` runs one scenario on both
and compares every result): every method that takes a :class:`UserKey` reads and writes that user's rows
only; a write is one transaction, checked against the shard's lease where the engine is shared.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

from memcore.graph import DiaryEntry, Direction, Entity, Fact
from memcore.model import UserKey
from memcore.records import ArchivedTurn, JobRecord, RecallHit, Turn, UserRows

if TYPE_CHECKING:
    from memcore.extraction.events import Event


class EventRepository(Protocol):
    """The archived user/assistant text turns of each (app, user, session), kept for session recall,
    extraction and re-extraction.

    A turn is (session, event id) within its user (:class:`memcore.records.Turn`). ``append`` is
    idempotent by (app, user, session, event id): a resent event keeps its first stored version. Each
    new turn gets an arrival number (increasing, never reused) and starts unextracted: the delta of a
    session is its unextracted turns in arrival order, whatever their timestamps say. Only visible
    turns are read by recall, extraction and re-extraction (:data:`memcore.records.TurnState`).
    """

    def append(self, key: UserKey, session: str, events: Sequence[Event]) -> int:
        """Store the text turns of ``events`` (and note the session, with its external-context mark);
        returns how many were new."""
        ...

    def read(self, key: UserKey, session: str | None = None) -> list[Event]:
        """Visible turns of one session (or of every session of ``key``), oldest first."""
        ...

    def arrived(self, key: UserKey, session: str) -> list[Event]:
        """Every turn the session ever archived (hidden and removed ones too), in arrival order."""
        ...

    def unextracted(self, key: UserKey, session: str, *, after_seq: int | None = None,
                    upto_seq: int | None = None) -> list[tuple[int, Event]]:
        """Visible turns not extracted yet as ``(arrival number, event)``, in arrival order; optionally only
        those after ``after_seq`` and up to ``upto_seq``."""
        ...

    def mark_extracted(self, key: UserKey, session: str, upto_seq: int | None = None,
                       ids: Sequence[str] | None = None) -> int:
        """Mark the session's turns extracted: those up to ``upto_seq``, or those named by ``ids``, or
        (neither given) all of them; returns how many changed."""
        ...

    def oldest_unextracted(self) -> float | None:
        """Epoch seconds of the oldest turn not extracted yet, over the archive's users."""
        ...

    def visible(self, key: UserKey, session: str, ids: Sequence[str]) -> set[str]:
        """Which of these event ids of the session are archived and visible."""
        ...

    def sessions_in_order(self, key: UserKey) -> list[str]:
        """``key``'s sessions that hold visible turns, by their first turn's time (then id)."""
        ...

    def search(self, key: UserKey, query: str, *, exclude_session: str | None = None,
               limit: int = 10, since: datetime | None = None) -> list[RecallHit]:
        """BM25 (or as good) over the visible turns of ``key``'s sessions other than ``exclude_session``,
        best first; CJK characters match one by one (:func:`memcore.text.tokenize`). ``since``: only turns
        timestamped then or later (the app's TTL: older turns have expired, swept or not)."""
        ...

    def count(self, key: UserKey | None = None) -> int:
        """Archived turns (of ``key``, or of the whole archive), any state."""
        ...

    def turns(self, key: UserKey, *, session: str | None = None,
              ids: Sequence[str] | None = None) -> list[ArchivedTurn]:
        """``key``'s archived turns in any state: of one session and/or with these event ids (any session
        when ``session`` is None); what the delete paths resolve provenance refs against."""
        ...

    def hide(self, key: UserKey, turns: Iterable[Turn]) -> int:
        """Hide these visible turns (a soft delete); returns how many changed."""
        ...

    def remove(self, key: UserKey, turns: Iterable[Turn]) -> int:
        """Remove these turns for good: text blanked everywhere (recall index included), the id kept;
        returns how many changed (removed ones are left as they are)."""
        ...

    def expire(self, app: str, before: datetime) -> int:
        """Delete ``app``'s turns with a timestamp before ``before``, except those an unfinished job of their
        session has yet to extract; returns how many."""
        ...


class SessionRepository(Protocol):
    """Each session's durable extraction cursor and external-context mark (sessions are noted by
    :meth:`EventRepository.append`)."""

    def sessions(self, key: UserKey) -> list[str]:
        """``key``'s archived sessions, by id."""
        ...

    def users(self, apps: Sequence[str] = (), users: Sequence[str] = ()) -> list[UserKey]:
        """Every (app, user) with an archived session, optionally only of ``apps`` / named ``users``."""
        ...

    def has_external_context(self, key: UserKey, session: str) -> bool:
        """Whether any event of the session (of any role) was marked ``external_context``."""
        ...

    def last_extract_at(self, key: UserKey, session: str) -> datetime | None:
        """The session's cursor: the newest extracted turn's time (for reporting and the checkers)."""
        ...

    def set_last_extract_at(self, key: UserKey, session: str, at: datetime) -> None:
        """Move the cursor to ``at`` (never backwards), durably."""
        ...


class JobRepository(Protocol):
    """One record per ingest (:class:`memcore.records.JobRecord`), numbered in ingest order."""

    def create(self, job: JobRecord) -> JobRecord:
        """Record ``job``; returns it with its ingest number."""
        ...

    def start(self, job_id: str, *, sync: bool = False) -> JobRecord:
        """Mark the job running (one more attempt); :class:`memcore.errors.NotFoundError` when it is gone."""
        ...

    def finish(self, job: JobRecord) -> JobRecord:
        """Store the final state of ``job`` (status, reason, result, cursor) and its finish time."""
        ...

    def get(self, job_id: str) -> JobRecord:
        """The job; :class:`memcore.errors.NotFoundError` when there is none."""
        ...

    def stored(self, job: JobRecord) -> JobRecord:
        """The stored state of ``job``, or ``job`` itself when its record is gone (its user was erased)."""
        ...

    def requeue_unfinished(self) -> list[JobRecord]:
        """Jobs a dead shard left queued or running, back to ``queued``, in ingest order."""
        ...

    def of_session(self, key: UserKey, session: str) -> list[JobRecord]:
        """Every recorded job of one session, in ingest order."""
        ...

    def pending_upto(self, key: UserKey, session: str) -> int | None:
        """The highest arrival bound of the session's unfinished jobs (the turns they will extract)."""
        ...

    def counts(self) -> dict[str, int]:
        """Jobs by status."""
        ...

    def prune(self, older_than_s: float) -> int:
        """Delete finished job records created more than ``older_than_s`` seconds ago; returns how many."""
        ...


class AccessRepository(Protocol):
    """When entries were last read (the TTL's optional refresh on access)."""

    def touch(self, key: UserKey, entry_ids: Iterable[str], at: float | None = None) -> None:
        """Record a read of these entries at ``at`` (epoch seconds, default now); never moves backwards."""
        ...

    def last_access(self, key: UserKey) -> dict[str, float]:
        """Entry id → epoch seconds of its last recorded read."""
        ...

    def forget(self, key: UserKey, entry_ids: Iterable[str]) -> None:
        ...


class SequenceRepository(Protocol):
    """The per-user write counter behind ``X-Memcluster-Seq``: it never repeats a number, not even after
    the user is erased."""

    def next(self, key: UserKey) -> int:
        """The user's next number (1 for a user never seen), committed before it is returned."""
        ...


class GraphRepository(Protocol):
    """A user's knowledge graph (:mod:`memcore.graph`): entities with their aliases, and fact versions.

    Rows are written only through :meth:`write` (one transaction: nothing half-written); the rules
    (idempotent adds, supersede, invalidate, limits) are :class:`memcore.knowledge.KnowledgeGraph`'s, so
    an engine stores and filters by key and entity only. Every list is in a stable order: facts by
    ``recorded_at`` then ``id``, entities by ``key``.
    """

    def entities(self, key: UserKey, keys: Sequence[str] | None = None) -> list[Entity]:
        """``key``'s entities with these keys (every entity when None); unknown keys are absent."""
        ...

    def resolve(self, key: UserKey, names: Sequence[str]) -> dict[str, str]:
        """Lookup keys (:func:`memcore.graph.entity_key` of a name or an alias) → the key of the entity each
        names: an entity's own key, or the entity an alias belongs to; unknown names are absent."""
        ...

    def facts(self, key: UserKey, entities: Sequence[str] | None = None, *, direction: Direction = "both",
              predicate: str | None = None, believed_only: bool = False) -> list[Fact]:
        """Fact versions of ``key`` whose subject (``outgoing``), object (``incoming``) or either (``both``) is
        one of ``entities`` (every fact when None), optionally of one predicate; retired versions too unless
        ``believed_only``."""
        ...

    def lines(self, key: UserKey, fact_ids: Sequence[str]) -> list[Fact]:
        """Every version of these fact lines (``Fact.fact_id``)."""
        ...

    def write(self, key: UserKey, *, at: datetime, retire: Sequence[str] = (), add: Sequence[Fact] = (),
              entities: Sequence[Entity] = (), drop: Sequence[str] = ()) -> int:
        """In one transaction: hard-delete every version of the lines ``drop`` (by ``Fact.fact_id``), set
        ``retired_at = at`` on these believed versions (by ``Fact.id``), insert ``add`` (a version id already
        stored is left as it is), and upsert ``entities`` (name, type and aliases replaced; an alias row points
        at its entity). Returns the versions deleted."""
        ...

    def count(self, key: UserKey) -> int:
        """``key``'s believed (unretired) fact versions."""
        ...

    def users(self, app: str) -> list[str]:
        """The users of ``app`` with a fact, an entity or a diary entry, sorted (what a backup exports)."""
        ...

    def expire(self, app: str, before: datetime) -> int:
        """Delete ``app``'s fact lines (every version) whose newest version was recorded before ``before`` (the
        app's TTL, like entries); returns the versions removed."""
        ...


class DiaryRepository(Protocol):
    """Agent diary entries per (app, user, agent): never part of memory search."""

    def write(self, key: UserKey, entries: Sequence[DiaryEntry]) -> int:
        """Store entries (an id already stored is left as it is); returns how many were new."""
        ...

    def read(self, key: UserKey, agent: str | None, *, limit: int | None, since: datetime | None = None,
             until: datetime | None = None, wing: str | None = None) -> tuple[list[DiaryEntry], int]:
        """``agent``'s entries (every agent's when None) written in ``[since, until]`` (and of ``wing``),
        newest first, at most ``limit`` (None: all); with the number of entries that matched."""
        ...

    def expire(self, app: str, before: datetime) -> int:
        """Delete ``app``'s entries written before ``before``; returns how many."""
        ...


class ShardLease(Protocol):
    """Fencing of shard incarnations: at most one incarnation of a shard number writes at a time.

    An incarnation takes the lease (``acquire``) when it starts, which raises the shard's epoch by one; from
    then on every write transaction of the archive checks, inside that transaction, that the epoch is still its
    own, and the shard calls ``check`` before each write to its other stores (vector store, keyword
    index). Once another incarnation has taken the lease, both raise :class:`memcore.errors.FencedError`,
    and keep raising it: the stale incarnation writes nothing more. An archive that a single process owns
    (SQLite in the shard's directory) has nothing to fence: its lease never fails.
    """

    @property
    def epoch(self) -> int | None:
        """This incarnation's epoch (None before ``acquire``)."""
        ...

    @property
    def fenced(self) -> bool:
        """Whether another incarnation has taken the lease since this one acquired it (known from a check)."""
        ...

    def acquire(self) -> int:
        """Take the lease for this incarnation: the shard's epoch + 1, returned."""
        ...

    def check(self) -> None:
        """Raise :class:`memcore.errors.FencedError` unless this incarnation still holds the lease."""
        ...


class EventArchive(Protocol):
    """Everything a shard keeps besides its stores: archived turns, session cursors, jobs, access times,
    write numbers, the knowledge graph and the agent diary, as repositories over one engine; every row is
    keyed by (app, user).

    Calls that span users (``requeue_unfinished``, ``oldest_unextracted``, ``counts``, ``prune``,
    ``users``, ``expire``) cover the users this archive serves: a shard's own file, or in an engine
    shared by every shard, the users the shard owns. Implementations:
    :class:`memcore.stores.sqlite_archive.SqliteArchive` (one SQLite file per shard) and
    :class:`memcore.stores.postgres_archive.PostgresArchive` (one PostgreSQL database shared by every
    shard; a shard serves the users :func:`memcore.ids.shard_of` routes to it). A database that cannot be
    reached raises :class:`memcore.errors.ArchiveUnavailableError`.
    """

    @property
    def events(self) -> EventRepository: ...

    @property
    def sessions(self) -> SessionRepository: ...

    @property
    def jobs(self) -> JobRepository: ...

    @property
    def access(self) -> AccessRepository: ...

    @property
    def sequence(self) -> SequenceRepository: ...

    @property
    def graph(self) -> GraphRepository: ...

    @property
    def diary(self) -> DiaryRepository: ...

    @property
    def lease(self) -> ShardLease: ...

    def erase_user(self, key: UserKey) -> dict[str, int]:
        """Delete every row of ``key`` but its write counter, in one transaction; returns the counts
        (``events``, ``sessions``, ``jobs``, ``access``, ``graph_facts``, ``graph_entities``,
        ``graph_aliases``, ``diary``)."""
        ...

    def keys(self) -> list[UserKey]:
        """Every (app, user) with any row here (turns, sessions, jobs, access times, graph facts or entities,
        diary entries or a write counter), sorted."""
        ...

    def export_user(self, key: UserKey) -> UserRows:
        """Every row of ``key`` (its write counter, knowledge graph and diary included), in arrival / ingest
        order."""
        ...

    def import_users(self, rows: Sequence[UserRows]) -> None:
        """Make each item of ``rows`` its user's rows here, in one transaction: rows of those users already here
        are replaced (importing the same rows again changes nothing but numbers), turns get new arrival numbers
        in their order and job bounds (``upto_seq``) follow them, jobs are numbered after this archive's in
        their order; a user's write counter never moves backwards (it may commit apart from the rest)."""
        ...

    def compact(self) -> None:
        """Rewrite the storage so that no deleted text is left in it (vacuum, index merge, log truncation)."""
        ...

    def close(self) -> None:
        ...
