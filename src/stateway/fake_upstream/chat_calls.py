"""A Chat answer's tool calls as the Chat Completions wire writes them (:mod:`.chat`).

Each call is a function's, with its ``arguments``, or with ``[[custom]]`` a custom tool's
(``type: "custom"``) with its raw ``input``, as OpenAI answers one: the ``input`` string of
its scripted arguments, else those arguments as they are. Streamed, each call opens with a
fragment naming it (its id, type and name), then its argument pieces follow; with
``[[interleave]]`` every call opens first, then their pieces come by turns; with
``[[newids]]`` each piece carries an id of its own, not the call's.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import orjson

from stateway.fake_upstream.delivery import PAYLOAD, STRUCT
from stateway.fake_upstream.plan import Plan, argument_chunks


def call_fragments(plan: Plan) -> Iterator[tuple[dict[str, Any], int]]:
    """The tool calls' streamed fragments: each call's opening one (id, name), then its
    argument pieces; with ``[[interleave]]``, every call's opening one first, then the
    pieces by turns (call 0's first, call 1's first, call 0's second, ...)."""
    openings = [
        {"index": index, "id": call.call_id, **called(plan, call.name, "")}
        for index, call in enumerate(plan.tool_calls)
    ]
    field, key = ("custom", "input") if plan.custom_calls else ("function", "arguments")
    pieces = [
        [
            {"index": index, **_piece_id(plan, call.call_id, number), field: {key: piece}}
            for number, piece in enumerate(argument_chunks(_given(plan, call.arguments)))
        ]
        for index, call in enumerate(plan.tool_calls)
    ]
    if not plan.interleave:
        for opening, own in zip(openings, pieces, strict=True):
            yield opening, STRUCT
            yield from ((piece, PAYLOAD) for piece in own)
        return
    yield from ((opening, STRUCT) for opening in openings)
    for turn in itertools.zip_longest(*pieces):
        yield from ((piece, PAYLOAD) for piece in turn if piece is not None)


def _piece_id(plan: Plan, call_id: str, number: int) -> dict[str, str]:
    """An argument piece's own ``id`` with ``[[newids]]`` (none without)."""
    return {"id": f"{call_id}_{number + 1}"} if plan.new_ids else {}


def called(plan: Plan, name: str, arguments: str) -> dict[str, Any]:
    """A call's ``type`` and what it calls: a function with its ``arguments``, or with
    ``[[custom]]`` a custom tool with its raw ``input``, as OpenAI answers one."""
    if plan.custom_calls:
        return {"type": "custom", "custom": {"name": name, "input": _raw_input(arguments)}}
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _given(plan: Plan, arguments: str) -> str:
    """What a call's streamed pieces carry: its arguments, or a custom call's raw input."""
    return _raw_input(arguments) if plan.custom_calls else arguments


def _raw_input(arguments: str) -> str:
    """A custom call's raw input: the ``input`` string of its scripted arguments, else
    the arguments as they are."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    value = parsed.get("input") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments
