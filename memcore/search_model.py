"""What a search asks (:class:`SearchOptions`, every knob, validated) and what it answers
(:class:`SearchHit`), and the topic filter's one rule (:func:`has_topics`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memcore.fields import MAX_RESULTS_LIMIT, MAX_TEXT_BYTES, check_topics, utc
from memcore.metadata import Scalar, check_filter
from memcore.model import Entry, Kind
from memcore.relevance import MAX_RELEVANCE, MIN_RELEVANCE
from memcore.vocabulary import MAX_TOKENS_LIMIT, KeywordQuery

TopicsMatch = Literal["any", "all"]
"""How a topic filter matches: an entry with any one of the topics, or with all of them."""


def has_topics(entry_topics: Sequence[str], topics: Sequence[str] | None, how: TopicsMatch = "any") -> bool:
    """The topic filter as the stores apply it (exact values): True when ``topics`` is empty."""
    if not topics:
        return True
    held = set(entry_topics)
    return all(t in held for t in topics) if how == "all" else any(t in held for t in topics)


class SearchOptions(BaseModel):
    """Every knob of a search. Defaults follow the tRPC-Agent-Go memory service (max 10, threshold 0.3 in dense
    search); the fusion knobs (``rrf_k`` .. ``merge_overlapping``) default to the service's configuration when
    left ``None``."""

    model_config = ConfigDict(extra="forbid")

    query: str = ""
    kind: Kind | None = None
    time_from: datetime | None = None
    time_to: datetime | None = None
    max_results: Annotated[int, Field(ge=1, le=MAX_RESULTS_LIMIT)] = 10
    max_tokens: Annotated[int, Field(ge=1, le=MAX_TOKENS_LIMIT)] | None = None
    """At most this many tokens of hit text in all (:mod:`memcore.budget`); None: the service's default."""
    similarity_threshold: Annotated[float, Field(ge=MIN_RELEVANCE, le=MAX_RELEVANCE)] | None = None
    """Keep hits with ``relevance`` at least this (:mod:`memcore.relevance`), dense or hybrid; None: the
    0.3 of the tRPC-Agent-Go memory service on the cosine for a dense search, no floor for a hybrid one
    (:func:`memcore.relevance.floor_of`)."""
    order_by_event_time: bool = False
    deduplicate: bool = False
    kind_fallback: bool = True
    hybrid: bool = True
    # Fusion knobs: None takes the service's default (memcore.settings.SearchDefaults, settings ``service.*``).
    rrf_k: Annotated[int, Field(ge=1, le=10_000)] | None = None
    dense_weight: Annotated[float, Field(ge=0, le=100)] | None = None
    keyword_weight: Annotated[float, Field(ge=0, le=100)] | None = None
    keyword_query: KeywordQuery | None = None
    date_boost: bool | None = None
    merge_overlapping: bool | None = None
    metadata_filter: dict[str, Scalar] | None = None
    """Only entries whose metadata has every ``key: value`` (equality, AND); see :mod:`memcore.metadata`."""
    topics: list[str] | None = None
    """Only entries with these topics (exact, case-sensitive): any one of them (``topics_match="any"``)
    or all of them (``"all"``); a hard filter in every store. None or empty: no topic filter."""
    topics_match: TopicsMatch = "any"
    include_facts: bool = False
    """Also answer the current knowledge-graph facts of the entities the query names (a separate ``facts``
    list, :func:`memcore.fact_search.facts_for_search`), their tokens taken from ``max_tokens`` first."""

    @field_validator("topics")
    @classmethod
    def _topics(cls, v: list[str] | None) -> list[str] | None:
        return check_topics(v) or None if v is not None else None

    @field_validator("metadata_filter", mode="before")
    @classmethod
    def _metadata_filter(cls, v: Any) -> dict[str, Scalar] | None:
        return check_filter(v)

    @field_validator("time_from", "time_to")
    @classmethod
    def _times(cls, v: datetime | None) -> datetime | None:
        return utc(v) if v is not None else None

    @field_validator("query")
    @classmethod
    def _query(cls, v: str) -> str:
        if len(v.encode("utf-8")) > MAX_TEXT_BYTES:
            raise ValueError(f"query is longer than {MAX_TEXT_BYTES} bytes")
        return v

    @model_validator(mode="after")
    def _range(self) -> SearchOptions:
        if self.time_from and self.time_to and self.time_from > self.time_to:
            raise ValueError("time_from is after time_to")
        return self


class SearchHit(BaseModel):
    """One result: ``score`` ranks (fused RRF score in hybrid search, cosine in dense search), ``relevance``
    judges (the query/memory cosine less a penalty for the query's names the memory lacks, -1..1,
    :mod:`memcore.relevance`); a search fills both."""

    entry: Entry
    score: float
    relevance: float | None = None
    """The cosine of the query's and the entry's vectors less the name penalty (-1..1,
    :class:`memcore.relevance.Judge`); None only for a hit built outside a search."""
    merged: list[str] = Field(default_factory=list)
    """Ids of further entries this hit's text includes (``merge_overlapping``); empty otherwise."""
    cut: list[str] = Field(default_factory=list)
    """Turn ids (provenance) left out of this hit's text to fit ``max_tokens``; empty when it is whole."""
