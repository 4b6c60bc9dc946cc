"""Canonical request -> an Anthropic Messages body, limited to what that API accepts.

- ``system`` and ``messages``: the instructions and items as blocks of alternating turns
  (:mod:`.anthropic_content`); at least one message is needed.
- Tool names are respelled into ``[A-Za-z0-9_-]`` (:mod:`.anthropic_names`); a tool's
  parameters without a ``type`` (OpenAI's ``{}`` for no arguments) are an object schema,
  as Anthropic requires. A request declaring no tools whose messages call some declares
  those, not to be called (``tool_choice`` ``none``): Anthropic refuses tool blocks in a
  request without tools.
- ``max_tokens`` is always sent (the backend's default when the client set none).
  Thinking: ``{"type": "disabled"}`` when the client asked for none (Messages'
  ``disabled``, a reasoning effort ``none``), since newer models
  think unasked when ``thinking`` is left out; nothing when the client said nothing;
  else an explicit budget, or one derived from the effort, kept within
  ``[1024, max_tokens)`` (half of the default when the client set no limit; no thinking
  when ``max_tokens`` leaves no room), except a Messages client's budget sent with the
  ``interleaved-thinking-2025-05-14`` beta, the whole turn's, which goes as it is; or,
  with ``thinking = "adaptive"`` or for a client that asked for adaptive thinking,
  adaptive thinking with the effort in ``output_config``; a Messages client's
  ``thinking.display`` goes along, and ``summarized`` for a Responses client that asked
  for a summary (Claude models from Opus 4.7 on omit the text unless asked so); a
  Messages client's ``output_config.effort`` goes whatever its thinking (Anthropic
  applies it to the whole answer). While thinking, sampling settings Anthropic refuses
  are left out (a temperature other than 1, ``top_k``, a ``top_p`` below 0.95), and a
  tool choice that forces a tool turns thinking off (the two cannot be combined), as
  does a last assistant message calling tools without its signed thinking (a Chat
  client's, or one whose reasoning item was dropped): Anthropic refuses thinking unless
  that message starts with a thinking block.
- Sampling as the model takes it (``AnthropicOptions.sampling``): ``all`` as asked;
  ``one``, ``temperature`` or else ``top_p``, never both (Claude models from Sonnet 4.5 to
  Opus 4.6 refuse both: "cannot both be specified for this model"); ``none``, none of
  ``temperature``, ``top_p`` and ``top_k`` (Claude models from Opus 4.7 on refuse each:
  "`temperature` is deprecated for this model"; API version 2026-10-21 has none).
- ``stop_sequences`` but the blank ones (empty, or whitespace only: Chat clients send
  ``"\\n"``), which Anthropic refuses: the backend ends the text at those itself.
- ``service_tier``: ``auto`` (and ``priority``) as ``auto``, ``default`` as
  ``standard_only``; others are not sent.
- ``metadata.user_id``: the end user's opaque id Anthropic detects abuse by, as OpenAI's
  ``safety_identifier`` is; else ``user`` (which it replaces; a Messages client's own
  ``user_id``).
- A ``json_schema`` text format is Anthropic's structured output,
  ``output_config.format``; ``json_object`` has no equivalent there and is not carried.
- Prompt caching: a Messages client's top-level ``cache_control`` as it came; OpenAI's
  implicit caching and breakpoints as marks (:mod:`.anthropic_caching`), at most four
  (:mod:`.anthropic_breakpoints`).
- A Messages client's ``safeguards`` (Claude Code's auto mode) go as they came to a server
  that runs them (``AnthropicOptions.safeguards``), and to no other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

from stateway.backends.anthropic_breakpoints import cap_breakpoints
from stateway.backends.anthropic_caching import PromptCacheMode, automatic_mark, order_lifetimes
from stateway.backends.anthropic_content import conversation
from stateway.backends.anthropic_names import ToolNames
from stateway.backends.reasoning_efforts import NONE
from stateway.core.adaptive_effort import ADAPTIVE_DEFAULT, ADAPTIVE_EFFORTS
from stateway.core.errors import InvalidRequest
from stateway.core.generation_settings import INTERLEAVED_THINKING
from stateway.core.inference import InferenceRequest
from stateway.core.items import Item

MIN_THINKING_BUDGET: Final = 1024
EFFORT_BUDGETS: Final = {
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 32768,
    "max": 65536,
}
"""The thinking budget asked for each reasoning effort when the client gave no budget."""
_ADAPTIVE_LEVELS: Final = {"minimal": "low"} | {level: level for level in ADAPTIVE_EFFORTS}
"""The ``output_config.effort`` of each reasoning effort: Anthropic's levels as they are,
``minimal`` as its nearest, ``low``. Any other (a Chat client's own word) is asked as
``ADAPTIVE_DEFAULT``, Anthropic's default, rather than refused upstream."""
Sampling = Literal["all", "one", "none"]
"""The sampling settings a model takes: ``all``; ``one`` of ``temperature`` and ``top_p``
(``temperature`` when both are asked), ``top_k`` too; ``none``."""
DISABLED: Final = {"type": "disabled"}
"""The ``thinking`` of a client that asked for no thinking."""
_SERVICE_TIERS: Final = {"auto": "auto", "priority": "auto", "default": "standard_only"}
"""Anthropic's service tier for each canonical (OpenAI) one it has: ``auto`` may use
priority capacity, ``standard_only`` never does; ``flex`` and others are not sent."""


@dataclass(slots=True, frozen=True)
class AnthropicOptions:
    default_max_tokens: int = 4096
    thinking: Literal["enabled", "adaptive"] = "enabled"
    prompt_cache_mode: PromptCacheMode = "implicit"
    """OpenAI's implicit breakpoint for a request that names no mode (Anthropic's
    automatic caching), or ``explicit``: only the breakpoints a request marks."""
    safeguards: bool = False
    """Whether the server runs a Messages client's ``safeguards`` (Anthropic's API does):
    they are sent on, else left out."""
    sampling: Sampling = "all"
    """Which of ``temperature``, ``top_p`` and ``top_k`` the model takes (:data:`Sampling`)."""


def to_upstream(
    request: InferenceRequest, options: AnthropicOptions, names: ToolNames
) -> dict[str, Any]:
    settings = request.settings
    max_tokens = settings.max_output_tokens or options.default_max_tokens
    system, messages = conversation(request, names)
    if not messages:
        raise InvalidRequest(
            "An Anthropic upstream needs at least one user or assistant message.",
            param="input",
            code="missing_required_parameter",
        )
    body: dict[str, Any] = {"model": request.model, "max_tokens": max_tokens}
    if system:
        body["system"] = system
    body["messages"] = messages
    if request.stream:
        body["stream"] = True
    forced = _tools(body, request, names)
    unsigned = _unsigned_tool_turn(messages)
    thinking = None if forced or unsigned else _thinking(body, request, options, max_tokens)
    asked_none = settings.reasoning_effort == NONE and settings.reasoning_budget is None
    if asked_none or settings.reasoning_disabled:
        body["thinking"] = dict(DISABLED)  # said so: newer models think unless told not to
    if options.sampling != "none":
        _sampling(body, request, options.sampling, thinking=thinking is not None)
    sent_stops = [s for s in settings.stop_sequences if not blank_stop(s)]
    if sent_stops:
        body["stop_sequences"] = sent_stops
    end_user = settings.safety_identifier or settings.user  # what user_id is for: abuse
    if end_user:
        body["metadata"] = {"user_id": end_user}
    tier = _SERVICE_TIERS.get(settings.service_tier or "")
    if tier is not None:
        body["service_tier"] = tier
    mark = automatic_mark(request, options.prompt_cache_mode)
    if mark is not None:
        body["cache_control"] = mark
    if settings.output_effort is not None:  # the whole answer's, thinking or not
        body.setdefault("output_config", {}).setdefault("effort", settings.output_effort)
    _output_format(body, settings.text_format)
    if options.safeguards and settings.safeguards:
        body["safeguards"] = settings.safeguards
    cap_breakpoints(body)
    order_lifetimes(body)
    return body


def _sampling(
    body: dict[str, Any], request: InferenceRequest, sampling: Sampling, *, thinking: bool
) -> None:
    """``temperature``, ``top_p`` and ``top_k`` as asked, but those Anthropic refuses while
    thinking, and ``top_p`` beside a ``temperature`` for a model that takes one only."""
    settings = request.settings
    if settings.temperature is not None and (not thinking or settings.temperature == 1):
        body["temperature"] = min(settings.temperature, 1.0)
    alone = sampling == "all" or "temperature" not in body
    if settings.top_p is not None and (not thinking or settings.top_p >= 0.95) and alone:
        body["top_p"] = settings.top_p
    if settings.top_k is not None and not thinking:
        body["top_k"] = settings.top_k


def _output_format(body: dict[str, Any], text_format: dict[str, Any]) -> None:
    """A ``json_schema`` text format as Anthropic's structured output
    (``output_config.format``), beside an adaptive effort there; Anthropic has no
    schema-less JSON mode, so ``json_object`` is not carried."""
    schema = text_format.get("schema")
    if text_format.get("type") == "json_schema" and isinstance(schema, dict):
        config = body.setdefault("output_config", {})
        config["format"] = {"type": "json_schema", "schema": schema}


def count_body(body: dict[str, Any]) -> dict[str, Any]:
    """The ``/messages/count_tokens`` body of a ``/messages`` body: what shapes the input
    (a structured output's schema too, in ``output_config``)."""
    kept = ("model", "system", "messages", "tools", "tool_choice", "thinking", "output_config")
    return {k: body[k] for k in kept if k in body}


def blank_stop(sequence: str) -> bool:
    """Whether Anthropic refuses ``sequence`` as a stop sequence (empty, or whitespace
    only): it is not sent, and the gateway ends the text at it itself."""
    return not sequence.strip()


def _tools(body: dict[str, Any], request: InferenceRequest, names: ToolNames) -> bool:
    """Add ``tools`` and ``tool_choice``; whether the choice forces a tool."""
    if not request.tools:
        _called_tools(body)
        return False
    body["tools"] = [_tool(tool, names) for tool in request.tools]
    choice = request.tool_choice
    if choice == "none":
        body["tool_choice"] = {"type": "none"}
        return False
    wire: dict[str, Any] = {"type": "auto"}
    if choice == "required":
        wire = {"type": "any"}
    elif isinstance(choice, dict) and isinstance(choice.get("name"), str):
        wire = {"type": "tool", "name": names.to_upstream(choice["name"])}
    if not request.settings.parallel_tool_calls:
        wire["disable_parallel_tool_use"] = True
    body["tool_choice"] = wire
    return bool(wire["type"] != "auto")


def _called_tools(body: dict[str, Any]) -> None:
    """For a request declaring no tools, the tools its messages call, declared (in place)
    not to be called (``tool_choice`` ``none``): Anthropic refuses ``tool_use`` and
    ``tool_result`` blocks in a request without ``tools`` ("... must define tools"), such
    as a compaction's summary call, which offers none, or a client's tool history sent
    with no tools. Each is declared once, as its calls spell it, taking any input."""
    called: dict[str, None] = {}
    for message in body["messages"]:
        for block in message["content"]:
            if block["type"] == "tool_use":
                called[block["name"]] = None
    if called:
        body["tools"] = [{"name": name, "input_schema": {"type": "object"}} for name in called]
        body["tool_choice"] = {"type": "none"}


def _tool(tool: Item, names: ToolNames) -> dict[str, Any]:
    wire: dict[str, Any] = {"name": names.to_upstream(str(tool["name"]))}
    if tool.get("description"):
        wire["description"] = tool["description"]
    schema = tool.get("parameters")
    schema = schema if isinstance(schema, dict) else {}
    # OpenAI takes parameters without a type ({} for no arguments); Anthropic requires it
    wire["input_schema"] = schema if "type" in schema else {"type": "object", **schema}
    if tool.get("strict") is True:  # strict tool use, as asked (not sent unless true)
        wire["strict"] = True
    if tool.get("cache_control"):
        wire["cache_control"] = tool["cache_control"]
    return wire


def _thinking(
    body: dict[str, Any], request: InferenceRequest, options: AnthropicOptions, max_tokens: int
) -> dict[str, Any] | None:
    settings = request.settings
    budget, effort = settings.reasoning_budget, settings.reasoning_effort
    if budget is None and effort in (None, NONE):
        return None
    shown = settings.reasoning_display
    display = {"display": shown} if shown in ("omitted", "summarized") else {}
    if budget is None and (options.thinking == "adaptive" or settings.reasoning_adaptive):
        thinking: dict[str, Any] = {"type": "adaptive", **display}
        level = _ADAPTIVE_LEVELS.get(str(effort), ADAPTIVE_DEFAULT)
        body["thinking"], body["output_config"] = thinking, {"effort": level}
        return thinking
    wanted = budget if budget is not None else EFFORT_BUDGETS.get(str(effort), 8192)
    if budget is not None and INTERLEAVED_THINKING in settings.anthropic_beta:
        ceiling = budget  # the whole turn's, sent with the beta that lets it pass max_tokens
    elif max_tokens <= MIN_THINKING_BUDGET:
        return None
    else:  # the client's limit is thinking and answer together; without one, thinking
        # may take half of the backend's default, not all of it
        ceiling = max_tokens - 1 if settings.max_output_tokens is not None else max_tokens // 2
    thinking = {
        "type": "enabled",
        "budget_tokens": max(MIN_THINKING_BUDGET, min(wanted, ceiling)),
        **display,
    }
    body["thinking"] = thinking
    return thinking


def _unsigned_tool_turn(messages: list[dict[str, Any]]) -> bool:
    """Whether the last assistant message calls tools without leading thinking: Anthropic
    refuses thinking then ("a final `assistant` message must start with a thinking
    block"), and a client that cannot carry signatures (Chat Completions) or that dropped
    the reasoning item sends such a tool turn."""
    last = next((m for m in reversed(messages) if m["role"] == "assistant"), None)
    if last is None:
        return False
    blocks = last["content"]
    calls = any(block["type"] == "tool_use" for block in blocks)
    return calls and blocks[0]["type"] not in ("thinking", "redacted_thinking")
