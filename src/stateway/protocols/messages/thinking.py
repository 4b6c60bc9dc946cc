"""A Messages request's ``thinking`` as the canonical reasoning settings.

``enabled`` -> its budget and the effort it amounts to (< 4096 ``low``, < 16384
``medium``, else ``high``); ``adaptive`` -> the effort of ``output_config.effort`` (every
level as it is, ``max`` too; ``high`` when absent or a level the gateway does not know);
``output_config.effort`` is also kept as asked whatever the thinking, for an Anthropic
upstream, which applies it to the whole answer, thinking or not;
``disabled`` -> no effort, and asked for no thinking: an Anthropic upstream is told so,
as newer models think unasked (Chat and Responses upstreams get their servers' default,
since not every server takes the effort ``none``); no thinking blocks are shown, as
Anthropic answers it.
Thinking that is shown asks for a summary (``reasoning_summary: "auto"``): a Responses
upstream's reasoning model (OpenAI's) hides its reasoning and gives only the summary, and
only when asked; the summary is then the thinking block's text. ``omitted`` asks for none.
``between_tools`` (thinking off, the model's short progress notes between tool calls
shown as thinking blocks) is taken as ``disabled``: no open model writes such notes, and
``disabled`` is what Anthropic's own fallback rules run a model that lacks
``between_tools`` with. A budget must be less than ``max_tokens``, unless the
``interleaved-thinking-2025-05-14`` beta makes it the whole turn's (as Anthropic checks
it). ``thinking.display`` is kept (``omitted``: thinking blocks without their text).
While the model thinks, a ``tool_choice`` that forces a tool (``any``, ``tool``) is
refused, as Anthropic refuses it: thinking takes ``auto`` and ``none`` only.
A ``thinking`` of only a ``block_binding`` (how stale thinking blocks are treated, which
the gateway's signatures settle: :mod:`.signatures`) names no type: the model's own
thinking, as without ``thinking`` (the Vercel AI SDK sends it so).

A ``role: "system"`` message with ``output_config.effort`` (Anthropic's per-message
effort) changes the effort from where it starts (:func:`effort_asked`): the user turn it
follows, when that turn holds new input, else the next one that does (a turn of tool
results only is none); the latest change started by the turn answered holds, in place of
the request's ``output_config.effort``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from stateway.core.adaptive_effort import ADAPTIVE_DEFAULT, ADAPTIVE_EFFORTS
from stateway.core.generation_settings import INTERLEAVED_THINKING, GenerationSettings
from stateway.protocols.messages.blocks import ToolResultBlock
from stateway.protocols.messages.encode import HIDDEN
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import MessageParam, OutputConfig, Thinking
from stateway.protocols.messages.tool_params import ToolChoice

_OFF: Final = frozenset({"disabled", "between_tools"})
"""The thinking types under which the model does not think."""
_FORCING: Final = frozenset({"any", "tool"})
"""The tool choices that force a tool."""


def apply_thinking(
    settings: GenerationSettings, thinking: Thinking | None, effort: str | None
) -> None:
    """Set ``settings``' reasoning as ``thinking`` (and the ``effort`` asked) ask."""
    if effort is not None:  # Anthropic's effort applies to the whole answer
        settings.output_effort = effort if effort in ADAPTIVE_EFFORTS else ADAPTIVE_DEFAULT
    if thinking is not None and thinking.type is None:
        if thinking.block_binding is None:  # nothing asked: as pydantic words a type left out
            raise field_error("thinking.type", "Field required", "missing_required_parameter")
        thinking = None
    if thinking is None or thinking.type in _OFF:
        settings.reasoning_display = HIDDEN  # as Anthropic: no thinking blocks
        settings.reasoning_disabled = thinking is not None  # asked for none, not left to
        # the upstream's default
        return
    if thinking.display is not None:  # a value Anthropic adds later: as summarized
        settings.reasoning_display = "omitted" if thinking.display == "omitted" else "summarized"
    if settings.reasoning_display != "omitted":
        settings.reasoning_summary = "auto"  # a model that hides its reasoning shows this
    if thinking.type == "adaptive":
        settings.reasoning_adaptive = True
        settings.reasoning_effort = effort if effort in ADAPTIVE_EFFORTS else ADAPTIVE_DEFAULT
        return
    if thinking.budget_tokens is None:
        raise field_error(
            "thinking.budget_tokens",
            "Field required when thinking is enabled.",
            code="missing_required_parameter",
        )
    budget = thinking.budget_tokens
    settings.reasoning_budget = budget
    settings.reasoning_effort = "low" if budget < 4096 else "medium" if budget < 16384 else "high"


def effort_asked(output: OutputConfig | None, messages: Sequence[MessageParam]) -> str | None:
    """The effort the answer is asked for: the request's, or the latest per-message change
    that has started by the user turn answered."""
    effort = output.effort if output is not None else None
    waiting: str | None = None
    """A change that starts at the next user turn with new input."""
    turn: MessageParam | None = None
    """The last message before this one that is not a system message."""
    for message in messages:
        changed = message.output_config.effort if message.output_config else None
        if message.role == "system":
            if changed is not None and turn is not None and _new_input(turn):
                effort, waiting = changed, None
            elif changed is not None:
                waiting = changed
            continue
        if waiting is not None and _new_input(message):
            effort, waiting = waiting, None
        turn = message
    return effort


def _new_input(message: MessageParam) -> bool:
    """A user turn that holds more than tool results."""
    if message.role != "user":
        return False
    if isinstance(message.content, str):
        return True
    return any(not isinstance(block, ToolResultBlock) for block in message.content)


def check_budget(settings: GenerationSettings, max_tokens: int) -> None:
    """A thinking budget of ``max_tokens`` or more is refused, as Anthropic refuses it,
    unless interleaved thinking makes it the whole turn's budget."""
    budget = settings.reasoning_budget
    if budget is None or budget < max_tokens:
        return
    if INTERLEAVED_THINKING not in settings.anthropic_beta:
        raise field_error("thinking.budget_tokens", "must be less than max_tokens.")


def check_thinking_tool_choice(thinking: Thinking | None, choice: ToolChoice | None) -> None:
    """A tool choice that forces a tool while the model thinks is refused, in Anthropic's
    words."""
    thinks = thinking is not None and thinking.type is not None and thinking.type not in _OFF
    if thinks and choice is not None and choice.type in _FORCING:
        raise field_error(
            "tool_choice", "Thinking may not be enabled when tool_choice forces tool use."
        )
