"""The OpenTelemetry semantic conventions for generative AI (``gen_ai.*``, still of
development status) on the gateway's spans, beside its own ``stateway.*`` attributes:

- an upstream attempt is an inference span, named ``chat {gen_ai.request.model}``, of kind
  CLIENT: the operation, the provider (by the backend's API), the model asked for, the
  request's numeric settings and the upstream's address; once answered, its finish reason,
  its token counts and the upstream's response id and model;
- a gateway tool call is an ``execute_tool {gen_ai.tool.name}`` span: the tool's name and
  type and the id of the call's output item.

Only names, numbers, ids and outcomes. The conventions' content attributes
(``gen_ai.input.messages``, ``gen_ai.output.messages``, ``gen_ai.system_instructions``,
``gen_ai.tool.definitions``, ``gen_ai.tool.call.arguments``, ``gen_ai.tool.call.result``)
are opt-in there and never set here, nor allowed (:data:`GENAI_ATTRIBUTES`); nor are the
stop sequences, which a client writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from opentelemetry.util.types import AttributeValue

from stateway.core.backend import Backend
from stateway.core.inference import Answered, InferenceRequest
from stateway.core.telemetry import ToolCall
from stateway.core.usage import Usage

Attributes = dict[str, AttributeValue]

CHAT: Final = "chat"
EXECUTE_TOOL: Final = "execute_tool"

PROVIDERS: Final[Mapping[str, str]] = {
    "chat": "openai",
    "responses": "openai",
    "anthropic": "anthropic",
}
"""``gen_ai.provider.name`` by the backend's API: the conventions' well-known value for
its wire (``openai`` for any OpenAI-compatible server: vLLM, SGLang, llama.cpp, ...; the
server's address and the response's model tell them apart). An API without one is named
as itself, a custom value as the conventions allow."""

GATEWAY_TOOL: Final = "extension"
"""``gen_ai.tool.type`` of every gateway tool: run by the gateway (the agent's side),
calling out to an MCP server or a search provider."""

GENAI_ATTRIBUTES: Final = frozenset(
    {
        "gen_ai.operation.name",
        "gen_ai.provider.name",
        "gen_ai.request.model",
        "gen_ai.request.max_tokens",
        "gen_ai.request.temperature",
        "gen_ai.request.top_p",
        "gen_ai.request.top_k",
        "gen_ai.request.frequency_penalty",
        "gen_ai.request.presence_penalty",
        "gen_ai.request.seed",
        "gen_ai.response.id",
        "gen_ai.response.model",
        "gen_ai.response.finish_reasons",
        "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens",
        "gen_ai.tool.name",
        "gen_ai.tool.type",
        "gen_ai.tool.call.id",
        "server.address",
        "server.port",
        "error.type",
    }
)
"""Every ``gen_ai.*`` (and ``server.*``, ``error.type``) attribute the gateway's spans may
carry."""


def inference(backend: Backend, request: InferenceRequest) -> tuple[str, Attributes]:
    """The name and attributes of an attempt's span as it starts."""
    model = request.model
    attributes: Attributes = {
        "gen_ai.operation.name": CHAT,
        "gen_ai.provider.name": PROVIDERS.get(backend.api, backend.api),
        "gen_ai.request.model": model,
        "stateway.backend": backend.name,
        "stateway.model": model,
    }
    if backend.address is not None:
        attributes["server.address"], attributes["server.port"] = backend.address
    settings = request.settings
    numbers = (
        ("gen_ai.request.max_tokens", settings.max_output_tokens),
        ("gen_ai.request.temperature", settings.temperature),
        ("gen_ai.request.top_p", settings.top_p),
        ("gen_ai.request.top_k", settings.top_k),
        ("gen_ai.request.frequency_penalty", settings.frequency_penalty),
        ("gen_ai.request.presence_penalty", settings.presence_penalty),
        ("gen_ai.request.seed", settings.seed),
    )
    attributes.update((key, value) for key, value in numbers if value is not None)
    return (f"{CHAT} {model}" if model else CHAT), attributes


def answer(reason: str, usage: Usage | None, noted: Answered | None) -> Attributes:
    """An attempt's attributes once its answer ended."""
    attributes: Attributes = {"gen_ai.response.finish_reasons": (reason,)}
    if usage is not None:
        attributes["gen_ai.usage.input_tokens"] = usage.input_tokens
        attributes["gen_ai.usage.output_tokens"] = usage.output_tokens
    if noted is not None and noted.response_id is not None:
        attributes["gen_ai.response.id"] = noted.response_id
    if noted is not None and noted.model is not None:
        attributes["gen_ai.response.model"] = noted.model
    return attributes


def tool_call(call: ToolCall) -> tuple[str, Attributes]:
    """The name and attributes of a gateway tool call's span."""
    name = call.name or call.kind
    attributes: Attributes = {
        "gen_ai.operation.name": EXECUTE_TOOL,
        "gen_ai.tool.name": name,
        "gen_ai.tool.type": GATEWAY_TOOL,
        "stateway.tool": call.kind,
        "stateway.tool.name": call.label,
    }
    if call.call_id is not None:
        attributes["gen_ai.tool.call.id"] = call.call_id
    return f"{EXECUTE_TOOL} {name}", attributes
