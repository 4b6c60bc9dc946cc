"""The canonical response: one generation's settings, output, status and usage.

``ResponseState`` is what runs mutate and what storage persists (as :func:`dump_state`,
with output items stored separately). Protocols render it into their own wire shape.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Final, Literal

from stateway.core.commands import CreateResponse
from stateway.core.compaction.sealed import COMPACTION_TRIGGER
from stateway.core.errors import GatewayError
from stateway.core.generation_settings import GenerationSettings
from stateway.core.items import Item
from stateway.core.ports import ConversationTurn, ResponseRecord
from stateway.core.usage import Iteration, Usage

Status = Literal["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]

UNFINISHED: Final = frozenset({"queued", "in_progress"})
"""Statuses of a response whose run has not ended (a background run is ``queued`` before
it starts)."""


@dataclass(slots=True)
class ResponseState:
    id: str
    tenant_id: str
    created_at: float
    model: str
    instructions: str | None
    previous_response_id: str | None
    store: bool
    settings: GenerationSettings
    status: Status = "in_progress"
    output: list[Item] = field(default_factory=list)
    usage: Usage | None = None
    error: dict[str, Any] | None = None
    incomplete_reason: str | None = None
    completed_at: float | None = None
    conversation_id: str | None = None
    stop_sequence: str | None = None
    """The stop sequence that ended the last round, if the upstream said (Messages'
    ``stop_sequence``); not stored."""
    stop_reason: str | None = None
    """The upstream's own word for how the last round ended, where the finish reason says
    less (an Anthropic upstream's ``model_context_window_exceeded``, ``pause_turn``,
    ``refusal``: :attr:`~stateway.core.inference.Finish.stop_reason`); not stored."""
    stop_details: dict[str, Any] | None = None
    """What it said of it (Anthropic's ``stop_details``); not stored."""
    safeguard_results: list[Any] | None = None
    """The last round's ``safeguard_results`` (an Anthropic upstream's); not stored."""
    prompt_usage: Usage | None = None
    """The usage the upstream reported before the run's first output, the prompt's (an
    Anthropic upstream's ``message_start``: input tokens, cache reads and writes), which a
    Messages stream's ``message_start`` shows; None when it reports only at the end (Chat
    and Responses upstreams); not stored."""
    iterations: list[Iteration] = field(default_factory=list)
    """Each sampling call so far with its own usage, which ``usage`` sums, when the
    response compacted (the compaction's summary, then each round; empty otherwise);
    not stored."""
    applied_edits: Sequence[dict[str, Any]] = ()
    """What each clearing edit of ``context_edits`` cleared from the context the response
    started from, when it cleared anything (:mod:`stateway.core.compaction.clearing`:
    Messages' ``context_management.applied_edits``); not stored."""
    uncounted_input: int = 0
    """The prompt tokens of rounds cut short after their output began (the client left,
    the answer was cut) that their upstream had not counted, estimated: a count it sent
    before the cut (an Anthropic upstream's ``message_start``) is in ``usage``. Charged
    with the run (:func:`~stateway.core.limits.charged_tokens`); not stored."""
    uncounted_output_from: int | None = None
    """Where in ``output`` the items of a round cut short after its output began start
    (its run's last round: a cut ends the run), whose output no upstream counted: charged
    estimated beside the usage of the rounds before it
    (:func:`~stateway.core.limits.charged_tokens`); not stored."""
    background: bool = False
    thread_system: list[Item] | None = None
    """A Messages thread's turn: the system items that led its context, which the next
    turn inherits unless it sends its own (:mod:`stateway.core.threads`); None: no
    thread's turn. Stored only when set."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Every routing attempt (:mod:`stateway.core.routing.attempts`): stored for
    operators, never in the public object."""

    @classmethod
    def start(
        cls, response_id: str, tenant_id: str, now: float, command: CreateResponse
    ) -> ResponseState:
        return cls(
            id=response_id,
            tenant_id=tenant_id,
            created_at=now,
            model=command.model,
            instructions=command.instructions,
            previous_response_id=command.previous_response_id,
            store=command.store,
            settings=command.settings,
            conversation_id=command.conversation_id,
            status="queued" if command.background else "in_progress",
            background=command.background,
            thread_system=None if command.thread is None else command.thread.system or [],
        )

    def fail(self, error: GatewayError) -> None:
        """End as ``failed`` with ``error`` as the response's ``error`` object."""
        self.status = "failed"
        code = error.code or error.type
        self.error = {"code": code, "message": error.message, "status": error.status}


_SETTINGS_FIELDS = tuple(f.name for f in dataclasses.fields(GenerationSettings))
_USAGE_FIELDS = tuple(f.name for f in dataclasses.fields(Usage))
_settings_values = attrgetter(*_SETTINGS_FIELDS)  # one C call for every field
_usage_values = attrgetter(*_USAGE_FIELDS)
_SETTINGS_DEFAULTS: Final = _settings_values(GenerationSettings())
"""Every setting's default, compared with, never handed out."""


def dump_state(state: ResponseState) -> dict[str, Any]:
    """A JSON object of everything but ``output`` (stored item by item) and tenant.
    Shallow on purpose (no ``dataclasses.asdict`` deep copy): it is serialized at once.
    Settings equal to their defaults are left out: :func:`load_state` restores them."""
    body = {
        "id": state.id,
        "created_at": state.created_at,
        "model": state.model,
        "instructions": state.instructions,
        "previous_response_id": state.previous_response_id,
        "store": state.store,
        "settings": _changed_settings(state.settings),
        "status": state.status,
        "usage": None
        if state.usage is None
        else dict(zip(_USAGE_FIELDS, _usage_values(state.usage), strict=True)),
        "error": state.error,
        "incomplete_reason": state.incomplete_reason,
        "completed_at": state.completed_at,
        "conversation_id": state.conversation_id,
        "background": state.background,
        "attempts": state.attempts,
    }
    if state.thread_system is not None:
        body["thread_system"] = state.thread_system
    return body


def _changed_settings(settings: GenerationSettings) -> dict[str, Any]:
    """The settings that differ from their defaults, by name: a request sets a few of
    them at most, and an object of them all made each save build, serialize and write
    some 1.3 kB more."""
    values = _settings_values(settings)
    if values == _SETTINGS_DEFAULTS:  # the usual case, compared in C
        return {}
    return {
        name: value
        for name, value, default in zip(_SETTINGS_FIELDS, values, _SETTINGS_DEFAULTS, strict=True)
        if value != default
    }


def load_state(tenant_id: str, body: dict[str, Any], output: list[Item]) -> ResponseState:
    usage = body.get("usage")
    return ResponseState(
        id=body["id"],
        tenant_id=tenant_id,
        created_at=body["created_at"],
        model=body["model"],
        instructions=body.get("instructions"),
        previous_response_id=body.get("previous_response_id"),
        store=body.get("store", True),
        settings=GenerationSettings(**body.get("settings", {})),
        status=body["status"],
        output=output,
        usage=None if usage is None else Usage(**usage),
        error=body.get("error"),
        incomplete_reason=body.get("incomplete_reason"),
        completed_at=body.get("completed_at"),
        conversation_id=body.get("conversation_id"),
        background=body.get("background", False),
        thread_system=body.get("thread_system"),
        attempts=body.get("attempts", []),
    )


def started_record(state: ResponseState, input_items: list[Item], owner: str) -> ResponseRecord:
    """The in-progress row written before ``response.created``: the request's input, no
    output yet, and the process that runs it."""
    return _record(state, input_items, [], owner)


def final_record(state: ResponseState, input_items: list[Item] | None = None) -> ResponseRecord:
    """What the end of a run writes: the state and its output, over its in-progress row,
    or with ``input_items`` when the run had none."""
    return _record(state, input_items or [], state.output, None)


APPENDED_ENDINGS: Final = frozenset({"completed", "incomplete"})
"""How a conversation turn must end for its input and output to join the conversation."""

CLIENT_LEFT: Final = "client_disconnected"
"""The ``incomplete_reason`` of a run whose only client went away."""
MAX_ROUNDS_REASON: Final = "max_rounds"
"""The ``incomplete_reason`` of a response that used its rounds on gateway tools, or
whose upstream paused its own tool loop (:data:`~stateway.core.inference.PAUSED`): either
turn goes on when sent back (a Messages thread's, from a continue sending nothing new)."""
STEERED_REASON: Final = "steered"
"""The ``incomplete_reason`` of a response that stopped before another round of its
gateway tool loop because input was queued to steer it (:attr:`Run.steered
<stateway.core.runs.Run.steered>`)."""
INTERRUPTED_REASON: Final = "interrupted"
"""The ``incomplete_reason`` of a response its client interrupted
(:attr:`CancelReason.INTERRUPTED <stateway.core.runs.CancelReason.INTERRUPTED>`)."""


def ended_steered(state: ResponseState) -> bool:
    """Whether the response stopped early to take steering input, which a successor
    continues as it would a completed one."""
    return state.status == "incomplete" and state.incomplete_reason == STEERED_REASON


def continuable(state: ResponseState) -> bool:
    """Whether a later request continues from the response as from a completed one: it
    completed, stopped early to take steering input, or was interrupted by its client
    (what it had completed is its output)."""
    return state.status == "completed" or (
        state.status == "incomplete" and state.incomplete_reason in _CONTINUED
    )


_CONTINUED: Final = frozenset({STEERED_REASON, INTERRUPTED_REASON})


def turn_end(state: ResponseState, input_items: list[Item]) -> ConversationTurn | None:
    """What the end of a conversation turn writes to its conversation: its input then its
    output when it ended completed or incomplete (as they would continue a chain), nothing
    when it failed or was cancelled (its client resends the input), nor when a Messages
    thread's client left it (:func:`thread_left`). A ``compaction_trigger`` is left out:
    an instruction to the turn, which its output's ``compaction`` item answers, not an
    item of the conversation (no conversation item type is one)."""
    if state.conversation_id is None:
        return None
    appended = state.status in APPENDED_ENDINGS and not thread_left(
        state.thread_system, state.incomplete_reason
    )
    if not appended:
        return ConversationTurn(state.conversation_id)
    kept = [item for item in input_items if item.get("type") != COMPACTION_TRIGGER]
    return ConversationTurn(state.conversation_id, items=kept + state.output)


def thread_left(thread_system: list[Item] | None, incomplete_reason: str | None) -> bool:
    """Whether a response is a Messages thread's turn that its client left: one the client
    may never have seen the id of (a timeout, a stream left before its start), so the
    thread goes on from the turn before it, as after a failed one."""
    return thread_system is not None and incomplete_reason == CLIENT_LEFT


def _record(
    state: ResponseState, input_items: list[Item], output_items: list[Item], owner: str | None
) -> ResponseRecord:
    return ResponseRecord(
        tenant_id=state.tenant_id,
        id=state.id,
        previous_response_id=state.previous_response_id,
        status=state.status,
        created_at=state.created_at,
        body=dump_state(state),
        input_items=input_items,
        output_items=output_items,
        owner=owner,
        served_by=served_by(state.attempts),
    )


def served_by(attempts: list[dict[str, Any]]) -> str | None:
    """The candidate key (``backend/model``) of the last attempt that succeeded, from the
    records of :mod:`stateway.core.routing.attempts`."""
    for attempt in reversed(attempts):
        if attempt["outcome"] == "ok":
            return f"{attempt['backend']}/{attempt['model']}"
    return None
