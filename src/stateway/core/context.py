"""Context: the items a round sends upstream, rebuilt from storage and checked.

A request's context is every item of its ``previous_response_id`` chain followed by its
own input (a ``failed`` response contributes its input only: its output was cut off, and
the model must not take it for a finished turn). A response still generating cannot be
continued yet. Checks happen here, before anything is sent: every item must be of a type the
chosen upstream API can carry, and every ``function_call_output`` must answer a call that
is still pending in the context.
"""

from __future__ import annotations

from stateway.core.commands import CreateResponse
from stateway.core.errors import InvalidRequest, PreviousResponseNotFound, ResponseInProgress
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MESSAGE,
    Item,
)
from stateway.core.ports import TOOL_OUTPUT, Backend, ResponseStore

_CALLS = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL})
_OUTPUTS = frozenset({FUNCTION_CALL_OUTPUT, CUSTOM_TOOL_CALL_OUTPUT})


async def build_context(
    store: ResponseStore, tenant_id: str, command: CreateResponse, backend: Backend
) -> list[Item]:
    prior: list[Item] = []
    if command.previous_response_id is not None:
        chain = await store.load_context(tenant_id, command.previous_response_id)
        if chain is None:
            raise PreviousResponseNotFound(command.previous_response_id)
        if chain.status == "in_progress":
            raise ResponseInProgress(command.previous_response_id)
        prior = chain.items
    _check_types(prior, command.input, backend)
    _check_call_outputs(prior, command.input)
    return prior + command.input if prior else list(command.input)


def _check_types(prior: list[Item], current: list[Item], backend: Backend) -> None:
    for item in prior:
        problem = _uncarried(item, backend, "")
        if problem is not None:
            raise InvalidRequest(
                f"The previous response holds {problem[1]}, which the upstream API of backend "
                f"'{backend.name}' cannot carry.",
                param="previous_response_id",
                code=problem[2],
            )
    for index, item in enumerate(current):
        problem = _uncarried(item, backend, f"input[{index}]")
        if problem is not None:
            param, what, code = problem
            raise InvalidRequest(
                f"{what[0].upper()}{what[1:]} is not supported by the upstream API of backend "
                f"'{backend.name}'.",
                param=param,
                code=code,
            )


def _uncarried(item: Item, backend: Backend, path: str) -> tuple[str, str, str] | None:
    """``(param, what, code)`` of the first part of ``item`` the backend cannot carry."""
    kind = item.get("type")
    if kind not in backend.carried_item_types:
        return f"{path}.type", f"input item type '{kind}'", "unsupported_item_type"
    if kind == MESSAGE:
        parts, slot, where = item.get("content"), str(item.get("role")), "content"
    elif kind in _OUTPUTS:
        parts, slot, where = item.get("output"), TOOL_OUTPUT, "output"
    else:
        return None
    if not isinstance(parts, list):
        return None
    carried = backend.carried_part_types.get(slot, frozenset())
    for index, part in enumerate(parts):
        part_kind = part.get("type") if isinstance(part, dict) else None
        if part_kind not in carried:
            return (
                f"{path}.{where}[{index}].type",
                f"content part type '{part_kind}' in a '{slot}' {kind}",
                "unsupported_content_type",
            )
    return None


def _check_call_outputs(prior: list[Item], current: list[Item]) -> None:
    pending: set[str] = set()
    for item in prior:
        _track(item, pending)
    for index, item in enumerate(current):
        if item.get("type") in _OUTPUTS:
            call_id = item.get("call_id")
            if call_id not in pending:
                raise InvalidRequest(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param=f"input[{index}].call_id",
                    code="tool_call_not_found",
                )
        _track(item, pending)


def _track(item: Item, pending: set[str]) -> None:
    kind = item.get("type")
    if kind in _CALLS:
        pending.add(item["call_id"])
    elif kind in _OUTPUTS:
        pending.discard(item["call_id"])
