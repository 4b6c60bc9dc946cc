"""The wire shapes of ``POST /v1/responses`` (and of ``/compact`` and ``/input_tokens``),
validated strictly at the edge.

Unknown top-level fields are ignored (clients such as Codex send their own). Types are
strict: a string where a number belongs is an error naming the field, never a coercion.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from stateway.protocols.moderation import Moderation
from stateway.protocols.prompt_cache_key import PromptCacheKey
from stateway.protocols.responses.metadata import MAX_METADATA_PAIRS
from stateway.protocols.safety_identifier import SafetyIdentifier
from stateway.protocols.service_tier import COMPACT_TIERS, RESPONSES_TIERS

ServiceTier = Annotated[str, Field(json_schema_extra={"enum": list(RESPONSES_TIERS)})]
"""A tier, listed in the schema; its value is checked by
:func:`~stateway.protocols.service_tier.check_service_tier`."""
CompactServiceTier = Annotated[str, Field(json_schema_extra={"enum": list(COMPACT_TIERS)})]
"""A compaction's tier: :data:`ServiceTier`'s, fewer."""


class TextConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    format: dict[str, Any] | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]
REASONING_EFFORTS: tuple[str, ...] = get_args(ReasoningEffort)
"""``reasoning.effort``'s values (a ``configuration_update`` item's too)."""


class ReasoningConfig(BaseModel):
    model_config = ConfigDict(extra="ignore")
    effort: ReasoningEffort | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None
    generate_summary: Literal["auto", "concise", "detailed"] | None = None


class PromptCacheOptions(BaseModel):
    """``prompt_cache_options``: ``mode`` and ``ttl`` (and fields of a later API) are for
    the upstream, which judges them; ``prewarm`` and ``comparison_response_id`` are read
    by :mod:`.decode`."""

    model_config = ConfigDict(extra="allow")
    mode: str | None = None
    ttl: str | None = None
    prewarm: bool | None = None
    comparison_response_id: str | None = None


class ImageOptions(BaseModel):
    """``image``: the gateway optimizes no image context (``disabled`` in effect), so
    ``enabled``, which requires it, is refused by :mod:`.decode`."""

    model_config = ConfigDict(extra="ignore")
    context_compression: Literal["auto", "enabled", "disabled"] | None = None


class BackgroundOptions(BaseModel):
    """``background_options``: every background response runs at once (within any
    ``completion_window``); ``continuation_id`` orders nothing here. The windows' rules are
    checked by :mod:`.decode`."""

    model_config = ConfigDict(extra="ignore")
    completion_window: Literal["soonest", "2h", "8h"] | None = None
    continuation_id: str | None = None


class AccessPrograms(BaseModel):
    """``access_programs``: only ``standard`` is served (:mod:`.decode` refuses another)."""

    model_config = ConfigDict(extra="ignore")
    cyber: Literal["standard", "daybreak_blue", "daybreak_red"] | None = None


class StreamOptions(BaseModel):
    """``stream_options``: ``include_obfuscation`` is accepted and ignored (no
    ``obfuscation`` fields are sent)."""

    model_config = ConfigDict(extra="ignore")
    include_obfuscation: bool | None = None


class ContextManagement(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    compact_threshold: int | None = Field(default=None, ge=1)


class CreateResponseBody(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = None
    """Null as when left out (the Open Responses spec allows it; the SDK sends
    ``input=None`` so), as on the ``/compact`` and ``/input_tokens`` bodies."""
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: str | dict[str, Any] | None = None
    store: bool | None = None
    stream: bool | None = None
    background: bool | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    max_output_tokens: int | None = Field(default=None, ge=16)
    """At least 16, as hosted and the Open Responses spec bound it (``Expected a value >=
    16``); a tool loop's later rounds may be sent less, what the earlier ones left."""
    max_tool_calls: int | None = Field(default=None, ge=1)
    """At least 1, as hosted bounds it (``Expected a value >= 1``)."""
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    metadata: (
        Annotated[dict[str, str], Field(json_schema_extra={"maxProperties": MAX_METADATA_PAIRS})]
        | None
    ) = None
    """Limited by :mod:`.metadata` (with the hosted API's messages); the limit is only
    stated in the schema here."""
    user: str | None = None
    safety_identifier: SafetyIdentifier | None = None
    prompt_cache_key: PromptCacheKey | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    moderation: Moderation | None = None
    """Refused when its policy blocks (:func:`~stateway.protocols.moderation.check_moderation`),
    else ignored."""
    include: list[str] | None = None
    truncation: Literal["auto", "disabled"] | None = None
    service_tier: ServiceTier | None = None
    """Refused by :mod:`.decode` unless one of the API's
    (:func:`~stateway.protocols.service_tier.check_service_tier`)."""
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    stream_options: StreamOptions | None = None
    context_management: list[ContextManagement] | None = None
    image: ImageOptions | None = None
    background_options: BackgroundOptions | None = None
    access_programs: AccessPrograms | None = None
    prompt: dict[str, Any] | None = None
    """A reusable prompt of the hosted platform: refused by :mod:`.decode` (there is none
    to resolve it against), where ignoring it would answer a different request."""


class CompactBody(BaseModel):
    """``POST /v1/responses/compact``: the summary call is cached and served as a create's
    rounds are (``prompt_cache_*``, ``service_tier``), for the end user it names
    (``safety_identifier``)."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    safety_identifier: SafetyIdentifier | None = None
    prompt_cache_key: PromptCacheKey | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    service_tier: CompactServiceTier | None = None
    image: ImageOptions | None = None
    conversation: object = None
    """Not a field of ``/compact`` (hosted's answers ``unknown_parameter``): refused by
    :mod:`.decode` when sent, since ignored it would compact the input alone."""


class InputTokensBody(BaseModel):
    """``POST /v1/responses/input_tokens``: the request fields that shape the input."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    """Optional for OpenAI (its default model); here it names the backend that counts."""
    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, min_length=1)
    conversation: str | dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    truncation: Literal["auto", "disabled"] | None = None
