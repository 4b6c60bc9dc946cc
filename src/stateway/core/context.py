"""Context: the items a round sends upstream, rebuilt from storage and checked.

A request's context is every item of its ``previous_response_id`` chain followed by its
own input. Checks happen here, before anything is sent: every item must be of a type the
chosen upstream API can carry, and every ``function_call_output`` must answer a call that
is still pending in the context.
"""

from __future__ import annotations

from stateway.core.commands import CreateResponse
from stateway.core.errors import InvalidRequest, PreviousResponseNotFound
from stateway.core.items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE, Item
from stateway.core.ports import Backend, ResponseStore


async def build_context(
    store: ResponseStore, tenant_id: str, command: CreateResponse, backend: Backend
) -> list[Item]:
    prior: list[Item] = []
    if command.previous_response_id is not None:
        loaded = await store.load_context(tenant_id, command.previous_response_id)
        if loaded is None:
            raise PreviousResponseNotFound(command.previous_response_id)
        prior = loaded
    _check_types(prior, command.input, backend)
    _check_call_outputs(prior, command.input)
    return prior + command.input if prior else list(command.input)


def _check_types(prior: list[Item], current: list[Item], backend: Backend) -> None:
    carried = backend.carried_item_types
    for item in prior:
        if item.get("type") not in carried:
            raise InvalidRequest(
                f"The previous response holds an item of type '{item.get('type')}', which "
                f"the upstream API of backend '{backend.name}' cannot carry.",
                param="previous_response_id",
            )
    for index, item in enumerate(current):
        if item.get("type") not in carried:
            raise InvalidRequest(
                f"Input item type '{item.get('type')}' is not supported by the upstream API "
                f"of backend '{backend.name}'.",
                param=f"input[{index}].type",
                code="unsupported_item_type",
            )
        if item.get("type") == MESSAGE and isinstance(item.get("content"), list):
            _check_parts(item["content"], backend, f"input[{index}].content")


def _check_parts(parts: list[Item], backend: Backend, path: str) -> None:
    for index, part in enumerate(parts):
        if part.get("type") not in backend.carried_part_types:
            raise InvalidRequest(
                f"Content part type '{part.get('type')}' is not supported by the upstream API "
                f"of backend '{backend.name}'.",
                param=f"{path}[{index}].type",
                code="unsupported_content_type",
            )


def _check_call_outputs(prior: list[Item], current: list[Item]) -> None:
    pending: set[str] = set()
    for item in prior:
        _track(item, pending)
    for index, item in enumerate(current):
        if item.get("type") == FUNCTION_CALL_OUTPUT:
            call_id = item.get("call_id")
            if call_id not in pending:
                raise InvalidRequest(
                    f"No tool call found for function call output with call_id {call_id}.",
                    param=f"input[{index}].call_id",
                )
        _track(item, pending)


def _track(item: Item, pending: set[str]) -> None:
    kind = item.get("type")
    if kind == FUNCTION_CALL:
        pending.add(item["call_id"])
    elif kind == FUNCTION_CALL_OUTPUT:
        pending.discard(item["call_id"])
