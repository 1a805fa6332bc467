"""One extraction job over a session delta, in the order of the seeds' auto-memory worker.

1. Load existing entries: a search with :func:`build_query` of the delta; when it fails, the
   newest few via ``read``; when both fail, raise :class:`memcore.errors.StoreError` (the
   caller keeps its cursor: nothing is written without knowing prior state). Skipped for an
   extractor that declares ``uses_existing`` False (verbatim) when no episode stage runs.
2. Call the extractor (its errors, :class:`memcore.errors.ExtractorError` included, propagate:
   the caller keeps its cursor for a retry).
3. Optionally run the assistant-episode stage (its failure is recorded, never raised).
4. Apply the operations one by one through the policy (:func:`apply_operations`): per-op
   failures are recorded in the report and the rest continue. A caller that serialises writes
   passes ``write_turn``: its turn is taken here, after the model calls.

Extractors cite the delta's event ids; the operations are applied with those made provenance
refs of the delta's session (:func:`memcore.provenance.cite`: ``"<session>/<event_id>"``).

The report's ``cursor`` is the timestamp of the last delta event: the caller moves the
session's durable ``last_extract_at`` to it only once this function has returned.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Literal, Protocol

from pydantic import BaseModel, Field

from memcore import tracing
from memcore.errors import MemoryServiceError, StoreError
from memcore.extraction.episodes import EpisodeResult
from memcore.extraction.events import Event, build_query, cursor_of
from memcore.fields import now_utc, utc
from memcore.knowledge import KnowledgeGraph
from memcore.model import Entry, Operation, UserKey
from memcore.policy.apply import apply_operations
from memcore.policy.facts import DeferredFacts, FactResult, apply_facts
from memcore.ports import Extractor
from memcore.provenance import cite
from memcore.records import OpResult
from memcore.search_model import SearchOptions
from memcore.service import MemoryService
from memcore.vocabulary import DEFAULT_POLICY, PolicyName

EXISTING_LIMIT = 20
FALLBACK_LIMIT = 10


class EpisodeStage(Protocol):
    def run(
        self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None,
        others: Sequence[Operation] = (),
    ) -> EpisodeResult: ...


class ExtractionReport(BaseModel):
    results: list[OpResult] = Field(default_factory=list)
    """One per applied operation (extractor operations first, then assistant episodes)."""
    rejected: list[str] = Field(default_factory=list)
    """Tool calls rejected by the extractor, and invalid assistant episodes (prefixed ``episode``)."""
    episode_errors: list[str] = Field(default_factory=list)
    """Failures of the assistant-episode stage (its episodes were dropped; ordinary results kept)."""
    existing_source: Literal["search", "read", "none"] = "none"
    existing_error: str | None = None
    """Why the existing-entry search failed when ``existing_source`` is ``read``."""
    counts: dict[str, int] = Field(default_factory=dict)
    cursor: datetime | None = None
    facts: list[FactResult] = Field(default_factory=list)
    """One per proposed knowledge-graph fact operation (applied when a graph was given)."""


def load_existing(
    service: MemoryService, key: UserKey, query: str, *, limit: int = EXISTING_LIMIT,
    fallback_limit: int = FALLBACK_LIMIT,
) -> tuple[list[Entry], Literal["search", "read"], str | None]:
    """Entries related to ``query`` (search), else the newest ``fallback_limit`` (read).

    Returns (entries, how, search error). Raises :class:`StoreError` when both fail.
    """
    search_error: str | None = "empty query"
    if query.strip():
        try:
            hits = service.search(key, SearchOptions(query=query, max_results=limit))
            return [h.entry for h in hits], "search", None
        except MemoryServiceError as exc:
            search_error = f"{type(exc).__name__}: {exc}"
    try:
        return service.read(key, fallback_limit), "read", search_error
    except MemoryServiceError as exc:
        raise StoreError(f"loading existing memories failed (search: {search_error}; read: {exc})",
                         field="existing") from exc


def run_extraction(
    service: MemoryService,
    key: UserKey,
    events_delta: Sequence[Event],
    extractor: Extractor,
    *,
    session: str,
    policy: PolicyName = DEFAULT_POLICY,
    episodes: EpisodeStage | None = None,
    existing_limit: int = EXISTING_LIMIT,
    fallback_limit: int = FALLBACK_LIMIT,
    enabled: Collection[str] | None = None,
    now: datetime | None = None,
    write_turn: Callable[[], MemoryService] | None = None,
    graph: KnowledgeGraph | DeferredFacts | None = None,
) -> ExtractionReport:
    """Extract ``events_delta``, turns of ``session`` (see :func:`memcore.extraction.events.extractable`),
    and apply the result.

    ``write_turn``, when given, is called once, just before operations are applied (never when
    there are none): it takes the caller's write turn and returns the service to write into
    (``service`` is then used for the reads before it). ``graph``: where the extractor's fact operations go
    (:mod:`memcore.policy.facts`; a :class:`~memcore.policy.facts.DeferredFacts`: held there for later, counted
    as ``facts_deferred``; None: they are dropped, counted as ``facts_dropped``).
    """
    delta = [e for e in events_delta if e.is_text]
    if not delta:
        return ExtractionReport(counts=_counts([], 0, 0, 0, 0))
    when = utc(now) if now is not None else now_utc()
    existing: list[Entry] = []
    source: Literal["search", "read", "none"] = "none"
    search_error: str | None = None
    if extractor.uses_existing or episodes is not None:
        existing, source, search_error = load_existing(
            service, key, build_query(delta), limit=existing_limit, fallback_limit=fallback_limit)
    extracted = extractor.extract(delta, existing, now=when)
    ops = cite(session, extracted.operations)
    rejected = list(extracted.rejected)
    episode_errors: list[str] = []
    n_episodes = 0
    if episodes is not None:
        stage = episodes.run(delta, existing, now=when, others=ops)
        if stage.error:
            episode_errors.append(stage.error)
        else:
            ops.extend(cite(session, stage.operations))
            n_episodes = len(stage.operations)
        rejected.extend(f"episode stage: {r}" for r in stage.rejected)
    target = write_turn() if write_turn is not None and (ops or extracted.facts) else service
    with tracing.span("memcluster.policy", memcluster__policy=policy, memcluster__operations=len(ops)):
        results = apply_operations(target, key, ops, policy, enabled=enabled)
    counts = _counts(results, len(delta), len(existing), len(rejected), n_episodes)
    facts: list[FactResult] = []
    if extracted.facts:
        if graph is None:
            counts["facts_dropped"] = len(extracted.facts)
        elif isinstance(graph, DeferredFacts):
            graph.hold(session, extracted.facts, cursor_of(delta) or when)
            counts["facts_deferred"] = len(extracted.facts)
        else:
            facts = apply_facts(graph, key, session, extracted.facts, cursor_of(delta) or when)
            counts.update(facts=len(facts), facts_applied=sum(f.status == "applied" for f in facts),
                          facts_failed=sum(f.status == "failed" for f in facts))
    return ExtractionReport(
        results=results,
        rejected=rejected,
        episode_errors=episode_errors,
        existing_source=source,
        existing_error=search_error if source == "read" else None,
        counts=counts,
        cursor=cursor_of(delta),
        facts=facts,
    )


def _counts(results: Sequence[OpResult], events: int, existing: int, rejected: int, episodes: int) -> dict[str, int]:
    return {
        "events": events,
        "existing": existing,
        "operations": len(results),
        "applied": sum(r.status == "applied" for r in results),
        "skipped": sum(r.status == "skipped" for r in results),
        "failed": sum(r.status == "failed" for r in results),
        "rejected": rejected,
        "episodes": episodes,
    }
