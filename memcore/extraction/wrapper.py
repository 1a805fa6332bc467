"""The base of extractors that wrap another one (a deadline, a stopwatch).

A wrapper is an :class:`memcore.ports.Extractor` whose capabilities (``default_policy``,
``uses_existing``, ``max_events``) are its inner extractor's, by construction: a subclass only
overrides :meth:`ExtractorWrapper.call`, which runs the inner ``extract``. So no caller needs to
look through a wrapper at the concrete extractor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from memcore.extraction.events import Event, ExtractionResult
from memcore.model import Entry
from memcore.ports import Extractor
from memcore.vocabulary import PolicyName


class ExtractorWrapper:
    """Forwards ``extract`` and the capabilities to ``inner``; subclasses override :meth:`call`."""

    def __init__(self, inner: Extractor) -> None:
        self.inner = inner

    @property
    def default_policy(self) -> PolicyName:
        return self.inner.default_policy

    @property
    def uses_existing(self) -> bool:
        return self.inner.uses_existing

    @property
    def max_events(self) -> int | None:
        return self.inner.max_events

    def extract(
        self, delta: Sequence[Event], existing: Sequence[Entry] = (), *, now: datetime | None = None
    ) -> ExtractionResult:
        return self.call(lambda: self.inner.extract(delta, existing, now=now))

    def call(self, extract: Callable[[], ExtractionResult]) -> ExtractionResult:
        """Run the inner extractor's call (override to time or bound it)."""
        return extract()
