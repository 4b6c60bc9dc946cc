"""Gateway tool items and events as a client reads them: checked against the installed
``openai`` SDK's types (strictly: no coercion) and against the stream's own rules."""

from __future__ import annotations

import re
from typing import Any

from openai.types.responses import ResponseOutputItem, ResponseStreamEvent
from pydantic import TypeAdapter

from stateway.core import events as ev
from stateway.protocols.responses.stream import encode_event

ITEMS: TypeAdapter[ResponseOutputItem] = TypeAdapter(ResponseOutputItem)
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


def sdk_item(item: dict[str, Any]) -> Any:
    """The SDK's model of an output item (raises when the SDK would not read it)."""
    return ITEMS.validate_python(item, strict=True)


def is_id(value: object, prefix: str) -> bool:
    """An OpenAI-style id with this prefix (``mcp_``, ``ws_``, ...)."""
    return isinstance(value, str) and re.fullmatch(rf"{prefix}_[0-9a-f]{{48}}", value) is not None


def check_stream(events: list[ev.Event]) -> None:
    """Every event encodes to an SDK stream event; each item is added once and done once
    at one output index; every event about an item names the item at that index, between
    its added and its done."""
    at: dict[int, str] = {}
    done: set[int] = set()
    for seq, event in enumerate(events):
        wire = encode_event(seq, event)
        EVENTS.validate_python(wire, strict=True)
        index = wire.get("output_index")
        if wire["type"] == "response.output_item.added":
            assert index not in at, f"output {index} added twice"
            at[index] = wire["item"]["id"]
        elif wire["type"] == "response.output_item.done":
            assert at.get(index) == wire["item"]["id"], f"output {index} done, not added"
            assert index not in done, f"output {index} done twice"
            done.add(index)
        elif "item_id" in wire:
            assert at.get(index) == wire["item_id"], f"{wire['type']} names another item"
            assert index not in done, f"{wire['type']} after its item was done"
    assert done == set(at), "an item was never done"
