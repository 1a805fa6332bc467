"""Build the configured extractor and assistant-episode stage from :class:`ExtractorSettings`.

No ``base_url``: the deterministic :class:`VerbatimExtractor` (granularity from the settings)
and no episode stage. With a ``base_url``: the :class:`LLMExtractor` with the settings' policy,
and the :class:`AssistantEpisodeStage` (sharing its client) when ``assistant_episodes`` is on.
"""

from __future__ import annotations

from typing import Any

import openai

from memcore.errors import ValidationError
from memcore.extraction.chat import AfterModel, BeforeModel
from memcore.extraction.episodes import AssistantEpisodeStage
from memcore.extraction.llm import LLMExtractor
from memcore.extraction.verbatim import VerbatimExtractor
from memcore.ports import Extractor
from memcore.settings import ExtractorSettings
from memcore.vocabulary import EXTRACTION_TOOLS, FACT_TOOLS


def build_extractor(
    settings: ExtractorSettings,
    *,
    client: openai.OpenAI | None = None,
    before_model: BeforeModel | None = None,
    after_model: AfterModel | None = None,
) -> Extractor:
    if not settings.base_url and client is None:
        return VerbatimExtractor(settings.granularity, window=settings.window)
    tools = EXTRACTION_TOOLS + FACT_TOOLS if settings.graph else EXTRACTION_TOOLS
    return LLMExtractor(settings.base_url, _model(settings), _key(settings), policy=settings.policy,
                        timeout=settings.job_timeout_s, before_model=before_model, after_model=after_model,
                        client=client, tools=tools)


def build_episode_stage(
    settings: ExtractorSettings,
    extractor: Extractor | None = None,
    **kwargs: Any,
) -> AssistantEpisodeStage | None:
    """The episode stage when enabled and a model is configured (it shares ``extractor``'s client)."""
    if not settings.assistant_episodes:
        return None
    if isinstance(extractor, LLMExtractor):
        return AssistantEpisodeStage(None, extractor.chat.model, chat=extractor.chat, **kwargs)
    if not settings.base_url and kwargs.get("client") is None:
        return None
    return AssistantEpisodeStage(settings.base_url, _model(settings), _key(settings),
                                 timeout=settings.job_timeout_s, **kwargs)


def _model(settings: ExtractorSettings) -> str:
    if not settings.model:
        raise ValidationError("an extractor base_url needs a model name", field="extractor.model")
    return settings.model


def _key(settings: ExtractorSettings) -> str | None:
    return settings.api_key.get_secret_value() if settings.api_key else None
