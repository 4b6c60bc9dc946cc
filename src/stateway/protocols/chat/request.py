"""The wire shape of ``POST /v1/chat/completions``, validated at the edge when the request
is translated (a request forwarded untouched is only parsed, see :mod:`.decode`).

Unknown fields are ignored at every level (servers such as vLLM take vendor fields the
gateway has no use for once translated); known ones are typed strictly, so a string where
a number belongs is an error naming the field. Messages are told apart by ``role`` and
content parts by ``type``; one outside those listed is an error naming it.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from stateway.protocols.moderation import Moderation
from stateway.protocols.prompt_cache_key import PromptCacheKey
from stateway.protocols.safety_identifier import SafetyIdentifier
from stateway.protocols.tool_name import MAX_LENGTH as MAX_NAME_LENGTH


class _Wire(BaseModel):
    model_config = ConfigDict(extra="ignore")


class TextPart(_Wire):
    type: Literal["text"]
    text: str
    prompt_cache_breakpoint: dict[str, Any] | None = None
    """Where a cached prefix ends (``mode``, ``ttl``): kept with the part, for the
    upstream to judge (as on every part below that has it)."""


class RefusalPart(_Wire):
    type: Literal["refusal"]
    refusal: str


class ImageURL(_Wire):
    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high", "original"] | None = None
    """``original``: full resolution (a Chat upstream is asked for ``high``)."""


class ImagePart(_Wire):
    type: Literal["image_url"]
    image_url: ImageURL
    prompt_cache_breakpoint: dict[str, Any] | None = None


class FileData(_Wire):
    file_data: str | None = None
    file_id: str | None = None
    filename: str | None = None


class FilePart(_Wire):
    type: Literal["file"]
    file: FileData
    prompt_cache_breakpoint: dict[str, Any] | None = None


class AudioPart(_Wire):
    type: Literal["input_audio"]
    input_audio: dict[str, Any]


UserPart = Annotated[TextPart | ImagePart | FilePart | AudioPart, Field(discriminator="type")]
AssistantPart = Annotated[TextPart | RefusalPart, Field(discriminator="type")]
PART_TYPES = frozenset({"text", "refusal", "image_url", "file", "input_audio"})


class SystemMessage(_Wire):
    role: Literal["system"]
    content: str | list[TextPart]
    name: str | None = None


class DeveloperMessage(_Wire):
    role: Literal["developer"]
    content: str | list[TextPart]
    name: str | None = None


class UserMessage(_Wire):
    role: Literal["user"]
    content: str | list[UserPart]
    name: str | None = None


class FunctionCall(_Wire):
    name: str = Field(min_length=1)
    arguments: str


class ToolCall(_Wire):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class CustomInput(_Wire):
    name: str = Field(min_length=1)
    input: str


class CustomToolCall(_Wire):
    """A call of a ``custom`` tool: its raw ``input``."""

    id: str = Field(min_length=1)
    type: Literal["custom"]
    custom: CustomInput


class AssistantMessage(_Wire):
    role: Literal["assistant"]
    content: str | list[AssistantPart] | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall | CustomToolCall] | None = None
    """``[]`` is none, as vLLM (which answers every message with it) takes it; hosted
    refuses it."""
    name: str | None = None
    reasoning_content: str | None = None
    """What vLLM and others call the model's reasoning (``reasoning`` in newer vLLM)."""
    reasoning: str | None = None


class ToolMessage(_Wire):
    role: Literal["tool"]
    content: str | list[TextPart]
    tool_call_id: str = Field(min_length=1)


Message = Annotated[
    SystemMessage | DeveloperMessage | UserMessage | AssistantMessage | ToolMessage,
    Field(discriminator="role"),
]
ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


class WebSearchOptions(_Wire):
    """``web_search_options``: search the web for the answer (the gateway's web search)."""

    search_context_size: Literal["low", "medium", "high"] | None = None
    user_location: dict[str, Any] | None = None


class FunctionDefinition(_Wire):
    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionTool(_Wire):
    type: Literal["function"]
    function: FunctionDefinition


class Grammar(_Wire):
    syntax: Literal["lark", "regex"]
    definition: str


class CustomFormat(_Wire):
    type: Literal["text", "grammar"]
    grammar: Grammar | None = None


class CustomDefinition(_Wire):
    name: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    description: str | None = None
    format: CustomFormat | None = None


class CustomTool(_Wire):
    """A tool whose input is free-form text (a grammar's, when its ``format`` has one)."""

    type: Literal["custom"]
    custom: CustomDefinition


Tool = Annotated[FunctionTool | CustomTool, Field(discriminator="type")]
"""Told apart by ``type``: one of neither is refused naming both."""
TOOL_TYPES = frozenset({"function", "custom"})


class NamedFunction(_Wire):
    name: str = Field(min_length=1)


class NamedToolChoice(_Wire):
    type: Literal["function"]
    function: NamedFunction


class NamedCustomChoice(_Wire):
    type: Literal["custom"]
    custom: NamedFunction


class AllowedTools(_Wire):
    mode: Literal["auto", "required"]
    tools: list[NamedToolChoice | NamedCustomChoice]


class AllowedToolsChoice(_Wire):
    """The tools the model may call, narrowed to those ``allowed_tools`` lists."""

    type: Literal["allowed_tools"]
    allowed_tools: AllowedTools


class StreamOptions(_Wire):
    include_usage: bool | None = None
    include_obfuscation: bool | None = None
    """Type-checked and ignored: no ``obfuscation`` fields are sent."""


class JSONSchema(_Wire):
    name: str = Field(min_length=1)
    description: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class ResponseFormat(_Wire):
    type: Literal["json_object", "json_schema", "text"]
    """Listed in the order hosted lists them when refusing another."""
    json_schema: JSONSchema | None = None


class ChatBody(_Wire):
    model: str = Field(min_length=1)
    messages: list[Message] = Field(min_length=1)
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    tools: list[Tool] | None = None
    web_search_options: WebSearchOptions | None = None
    tool_choice: (
        Literal["none", "auto", "required"]
        | NamedToolChoice
        | NamedCustomChoice
        | AllowedToolsChoice
        | None
    ) = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, ge=0, le=1)
    top_k: int | None = None
    """A vendor field (vLLM, llama.cpp); -1 or 0 means no limit there."""
    n: int | None = Field(default=None, ge=1)
    seed: int | None = None
    response_format: ResponseFormat | None = None
    reasoning_effort: str | None = Field(default=None, min_length=1)
    verbosity: Literal["low", "medium", "high"] | None = None
    user: str | None = None
    safety_identifier: SafetyIdentifier | None = None
    prompt_cache_key: PromptCacheKey | None = None
    prompt_cache_retention: Literal["in_memory", "24h"] | None = None
    prompt_cache_options: dict[str, Any] | None = None
    moderation: Moderation | None = None
    service_tier: str | None = None
    metadata: dict[str, str] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    modalities: list[Literal["text", "audio"]] | None = None
    store: bool | None = None
    """OpenAI's stored completions: accepted and ignored (nothing is stored)."""
