"""Context: the items a round sends upstream, rebuilt from storage and checked.

A request's context is every item of its ``previous_response_id`` chain (or of its
conversation) followed by its own input (a ``failed`` response contributes its input
only: its output was cut off, and the model must not take it for a finished turn). A
response still generating cannot be continued yet. Checks happen here, before anything is
sent: every item and content part of a type the gateway models must be of a type the
chosen upstream API can carry (a text file, for one that gives it as its text:
:mod:`stateway.core.text_files`), and every tool
output (``function_call_output``, ``custom_tool_call_output``, the shell and apply_patch
outputs) must answer a call of its kind that is still pending in the context.

An item of a type the gateway does not model (an ``image_generation_call`` from a turn
hosted OpenAI ran, a type yet to come) reaches an upstream that speaks Responses natively
as it is; any other upstream's model is not shown it (:func:`shown`), its content
included, though it is kept in the context as sent (stored, listed, echoed): the upstream
API has no place for it, and what it holds is for a model that knows its type.
"""

from __future__ import annotations

from typing import Final

from stateway.core.backend import TOOL_OUTPUT, Backend
from stateway.core.commands import CreateResponse
from stateway.core.configuration_updates import CONFIGURATION_UPDATE
from stateway.core.errors import (
    InvalidRequest,
    PreviousResponseNotFound,
    ResponseInProgress,
    UncarriedPart,
)
from stateway.core.immutable import immutable
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MESSAGE,
    REASONING,
    TOOL_SEARCH_CALL,
    TOOL_SEARCH_OUTPUT,
    Item,
)
from stateway.core.ports import ResponseStore
from stateway.core.references import ITEM_REFERENCE
from stateway.core.response import UNFINISHED
from stateway.core.text_files import INPUT_FILE, file_text
from stateway.core.tools import client_hosted
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES

_ANSWERS = {
    FUNCTION_CALL: FUNCTION_CALL_OUTPUT,
    CUSTOM_TOOL_CALL: CUSTOM_TOOL_CALL_OUTPUT,
    **client_hosted.ANSWERS,
    TOOL_SEARCH_CALL: TOOL_SEARCH_OUTPUT,
}
"""Each client-owned call type, and the output type that answers it."""
_OUTPUTS = frozenset(_ANSWERS.values())
_TOOL_ITEMS = frozenset(_ANSWERS) | _OUTPUTS | {MCP_APPROVAL_RESPONSE}
"""Calls, their outputs and approval responses: what answers, or is answered."""
_PART_OUTPUTS = frozenset({FUNCTION_CALL_OUTPUT, CUSTOM_TOOL_CALL_OUTPUT})
"""Outputs whose ``output`` may be a list of content parts (checked like a message's)."""
_TOOL_SEARCH = frozenset({TOOL_SEARCH_CALL, TOOL_SEARCH_OUTPUT})
_GATEWAY_ITEMS = frozenset({"compaction", "compaction_trigger", CONFIGURATION_UPDATE})
"""Items the gateway itself turns into context (:mod:`stateway.core.compaction`) or
settings (:mod:`stateway.core.configuration_updates`): no upstream ever sees them, so every
backend takes them."""
MODELLED_ITEM_TYPES: Final = (
    frozenset({MESSAGE, FUNCTION_CALL, FUNCTION_CALL_OUTPUT, REASONING, ITEM_REFERENCE})
    | REWRITTEN_ITEM_TYPES
    | _GATEWAY_ITEMS
)
"""The input item types the gateway models (the Responses decoder checks each one's
shape): every backend carries all of them, but ``item_reference``, which is resolved before
a request is planned (:mod:`stateway.core.references`). An item of another type is carried
untouched to an upstream that speaks Responses, and not shown to any other's model."""


_PRIOR = {
    "previous_response_id": "The previous response",
    "conversation": "The conversation",
}
"""Where prior items come from (the param an error names), and how its message says so."""


async def build_context(
    store: ResponseStore,
    tenant_id: str,
    command: CreateResponse,
    backend: Backend,
    conversation: list[Item] | None = None,
) -> list[Item]:
    """``conversation``: the items of the conversation a turn continues."""
    prior = await load_prior(store, tenant_id, command, conversation)
    problem = uncarried(prior, command.input, backend)
    if problem is not None:
        raise problem
    return checked_context(prior, command.input)


@immutable
class Prior:
    """The items before a request's input, and where they come from (``source``: the
    param an error names); ``served_by``: the candidate that served the parent response,
    as stored (a cache affinity hint)."""

    items: list[Item]
    source: str = "previous_response_id"
    served_by: str | None = None

    def joined(self, current: list[Item]) -> list[Item]:
        return self.items + current if self.items else list(current)


async def load_prior(
    store: ResponseStore,
    tenant_id: str,
    command: CreateResponse,
    conversation: list[Item] | None = None,
) -> Prior:
    """The stored items a request continues (its conversation's, or its chain's)."""
    if conversation is not None:
        return Prior(conversation, "conversation")
    if command.prior is not None:
        return Prior(command.prior)
    if command.previous_response_id is None:
        return Prior([])
    chain = await store.load_context(tenant_id, command.previous_response_id)
    if chain is None:
        raise PreviousResponseNotFound(command.previous_response_id)
    if chain.status in UNFINISHED:
        raise ResponseInProgress(command.previous_response_id)
    return Prior(chain.items, served_by=chain.served_by)


_TEXT_FILES = "; only a text file is (inline: a base64 data URL of a text media type, UTF-8)"
"""What a refused file's message adds when the backend carries text files."""


def uncarried(prior: Prior, current: list[Item], backend: Backend) -> InvalidRequest | None:
    """The error naming the first item (or content part) ``backend`` cannot carry (of the
    items its model is shown: :func:`shown`)."""
    for item in prior.items:
        problem = _uncarried(item, backend, "")
        if problem is not None:
            held = f" (item '{item['id']}')" if isinstance(item.get("id"), str) else ""
            remedy = (
                " Delete that item from the conversation to continue it."
                if prior.source == "conversation" and held
                else ""
            )
            return InvalidRequest(
                f"{_PRIOR[prior.source]} holds {problem[1]}{held}, which the upstream API of "
                f"backend '{backend.name}' cannot carry.{remedy}",
                param=prior.source,
                code=problem[2],
            )
    for index, item in enumerate(current):
        problem = _uncarried(item, backend, f"input[{index}]")
        if problem is not None:
            param, what, code, part_kind = problem
            note = _TEXT_FILES if part_kind == INPUT_FILE and backend.inlines_text_files else ""
            message = (
                f"{what[0].upper()}{what[1:]} is not supported by the upstream API of backend "
                f"'{backend.name}'{note}."
            )
            if part_kind is not None:
                return UncarriedPart(
                    message, param=param, part_type=part_kind, backend=backend.name
                )
            return InvalidRequest(message, param=param, code=code)
    return None


def _uncarried(item: Item, backend: Backend, path: str) -> tuple[str, str, str, str | None] | None:
    """``(param, what, code, part type)`` of the first part of ``item`` the backend cannot
    carry (no part type: the item itself, of a type the gateway models)."""
    kind = item.get("type")
    if kind in _GATEWAY_ITEMS:
        return None
    if kind not in backend.carried_item_types and not backend.carries_unknown_types:
        if kind not in MODELLED_ITEM_TYPES:
            return None  # not shown to its model: nothing of it is sent
        return f"{path}.type", f"input item type '{kind}'", "unsupported_item_type", None
    if kind == MESSAGE:
        parts, slot, where = item.get("content"), str(item.get("role")), "content"
    elif kind in _PART_OUTPUTS:
        parts, slot, where = item.get("output"), TOOL_OUTPUT, "output"
    else:
        return None
    if not isinstance(parts, list):
        return None
    carried = backend.carried_part_types.get(slot, frozenset())
    for index, part in enumerate(parts):
        part_kind = part.get("type") if isinstance(part, dict) else None
        if part_kind not in carried and not _inlined(part, backend):
            return (
                f"{path}.{where}[{index}].type",
                f"content part type '{part_kind}' in a '{slot}' {kind}",
                "unsupported_content_type",
                str(part_kind),
            )
    return None


def shown(items: list[Item], backend: Backend) -> list[Item]:
    """``items`` as ``backend``'s model is shown them: all of them for an upstream that
    speaks Responses natively; for any other, without the items of types the gateway does
    not model (:func:`unshown_types`)."""
    if backend.carries_unknown_types:
        return items
    return [item for item in items if not _unshown(item, backend)]


def unshown_types(items: list[Item], backend: Backend) -> list[str]:
    """The types of the items of ``items`` that ``backend``'s model is not shown, once
    each, in order: those the gateway does not model (:data:`MODELLED_ITEM_TYPES`), for a
    backend that does not carry them."""
    if backend.carries_unknown_types:
        return []
    kinds = (str(item.get("type")) for item in items if _unshown(item, backend))
    return list(dict.fromkeys(kinds))


def _unshown(item: Item, backend: Backend) -> bool:
    kind = item.get("type")
    return kind not in backend.carried_item_types and kind not in MODELLED_ITEM_TYPES


def _inlined(part: Item, backend: Backend) -> bool:
    """A text file, which ``backend`` carries as its text (:mod:`stateway.core.text_files`)."""
    return backend.inlines_text_files and isinstance(part, dict) and file_text(part) is not None


def checked_context(prior: Prior, current: list[Item]) -> list[Item]:
    """``prior`` then ``current``, checked: every call has a unique non-empty ``call_id``;
    each output answers exactly one pending call of its own kind (a ``tool_search_output``
    a client-executed ``tool_search_call``); no call of the context is left without its
    output; an ``mcp_approval_response`` answers an ``mcp_approval_request`` of the
    context. A call cut short (``incomplete``: its response was cancelled or ran out of
    tokens while the call was being written) needs no output; left unanswered, it is left
    out, since a model must never see a call without its output (its id stays taken:
    :attr:`~stateway.core.runs.Run.context`). Nor an output without its call: one of
    ``prior`` whose call is gone (a conversation's call item deleted) is left out too, as
    is a call cut short whose id a later call of ``prior`` took (stored before ids were
    kept apart)."""
    calls = _Calls("input")
    calls.walk(prior.items, current)
    items = prior.joined(current)
    if not calls.pending and not calls.dropped:  # the common case: every call answered
        return items
    _refuse_unanswered(calls.pending)
    cut = {call_id for call_id, (_, required) in calls.pending.items() if not required}
    gone = {id(item) for item in calls.dropped}
    return [
        i
        for i in items
        if id(i) not in gone and (i.get("type") not in _ANSWERS or i["call_id"] not in cut)
    ]


def _refuse_unanswered(pending: dict[str, tuple[str, bool]]) -> None:
    missing = [(call_id, answer) for call_id, (answer, required) in pending.items() if required]
    if missing:
        call_id, answer = missing[0]
        kind = "custom tool call" if answer == CUSTOM_TOOL_CALL_OUTPUT else "function call"
        if answer in client_hosted.ITEM_TYPES:
            kind = answer.removesuffix("_output").replace("_", " ")
        if answer == TOOL_SEARCH_OUTPUT:
            kind = "tool search call"
        raise InvalidRequest(
            f"No tool output found for {kind} {call_id}.",
            param="input",
            code="tool_output_missing",
        )


def check_added_answers(prior: list[Item], added: list[Item]) -> None:
    """Items added to a conversation (``items[i]``): each output answers a call of
    ``prior`` or of ``added`` before it that is not answered yet, each call has its own
    ``call_id``, and each ``mcp_approval_response`` answers a request, as in a request's
    input; but a call may stay unanswered (its output can be added later)."""
    _Calls("items").walk(prior, added)


def has_tool_items(items: list[Item]) -> bool:
    """Whether any of ``items`` is a tool call, its output or an approval response (what
    :func:`check_added_answers` needs the items before them for)."""
    return any(item.get("type") in _TOOL_ITEMS for item in items)


class _Calls:
    """The calls of items walked in order (``prior``, then ``current``: ``field`` of the
    request, checked as it is tracked). ``pending``: the calls left unanswered, by
    ``call_id``, with the type that answers each and whether an answer is required.
    ``dropped``: the items of ``prior`` to leave out of a context (an output answering no
    call; a call cut short whose id a later call took)."""

    __slots__ = ("_answered", "_approvals", "_cut", "_field", "_seen", "dropped", "pending")

    def __init__(self, field: str) -> None:
        self._field = field
        self.pending: dict[str, tuple[str, bool]] = {}
        self.dropped: list[Item] = []
        self._seen: set[str] = set()
        self._answered: set[tuple[str, str]] = set()
        """The ``(call_id, output type)`` of each call answered so far, to name a second
        output a duplicate rather than one of no call."""
        self._approvals: set[str] = set()
        self._cut: dict[str, Item] = {}
        """The calls of ``prior`` cut short and not answered yet, by ``call_id``."""

    def walk(self, prior: list[Item], current: list[Item]) -> None:
        for item in prior:
            self._track(item, None)
        for index, item in enumerate(current):
            self._track(item, index)

    def _track(self, item: Item, index: int | None) -> None:
        """Account for one item; ``index`` is its place in the request's ``field`` (None
        for the stored chain, which was checked when it was written)."""
        kind = item.get("type")
        if kind in _TOOL_SEARCH and item.get("execution") == "server":
            return  # the gateway's own search: its output always follows it
        pending = self.pending
        if kind in _ANSWERS:
            call_id = item["call_id"]
            if index is not None and (not call_id or call_id in self._seen):
                raise InvalidRequest(
                    f"Duplicate or empty call_id {call_id!r}: every tool call needs its own.",
                    param=f"{self._field}[{index}].call_id",
                    code="duplicate_call_id" if call_id else "invalid_value",
                )
            self._seen.add(call_id)
            complete = item.get("status") != "incomplete"
            if index is None:
                superseded = self._cut.pop(call_id, None)
                if superseded is not None:  # its id taken again: only the later call stays
                    self.dropped.append(superseded)
                if not complete:
                    self._cut[call_id] = item
            # A call cut short (``incomplete``) may be answered, but need not be.
            pending[call_id] = (_ANSWERS[kind], complete)
        elif kind in _OUTPUTS:
            call_id = client_hosted.output_call_id(item)
            if pending.get(call_id, ("", False))[0] == kind:
                del pending[call_id]
                self._cut.pop(call_id, None)
                self._answered.add((call_id, kind))
            elif index is not None and (call_id, kind) in self._answered:
                raise InvalidRequest(
                    f"Duplicate {kind} for call_id {call_id!r}: its call already has an "
                    "output, and each call takes exactly one.",
                    param=f"{self._field}[{index}].call_id",
                    code="tool_call_not_found",
                )
            elif index is not None:
                raise InvalidRequest(
                    f"No tool call found for {kind.replace('_', ' ')} with call_id {call_id}.",
                    param=f"{self._field}[{index}].call_id",
                    code="tool_call_not_found",
                )
            else:
                self.dropped.append(item)
        elif kind == MCP_APPROVAL_REQUEST:
            self._approvals.add(item.get("id", ""))
        elif kind == MCP_APPROVAL_RESPONSE and index is not None:
            request_id = item.get("approval_request_id")
            if request_id not in self._approvals:
                raise InvalidRequest(
                    f"No MCP approval request found with id {request_id}.",
                    param=f"{self._field}[{index}].approval_request_id",
                    code="approval_request_not_found",
                )
