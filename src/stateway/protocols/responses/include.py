"""``include``: the output data a create, a retrieve or an input item listing asks to be
shown (the hosted API's values; the gateway acts on some, the rest change nothing)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from stateway.core.errors import InvalidRequest
from stateway.protocols.validation import unsupported_value

INCLUDABLE: Final = (
    "file_search_call.results",
    "web_search_call.results",
    "web_search_call.action.sources",
    "message.input_image.image_url",
    "computer_call_output.output.image_url",
    "code_interpreter_call.outputs",
    "reasoning.encrypted_content",
    "message.output_text.logprobs",
)
"""The ``include`` values the hosted API takes (the SDK's ``ResponseIncludable``); the
gateway acts on ``reasoning.encrypted_content`` and ``message.output_text.logprobs``."""


def read_include(include: Sequence[str] | None) -> tuple[str, ...] | None:
    """A read's ``include``, checked; None (a surface without one: MCP's tools) shows
    stored items as they are."""
    if include is None:
        return None
    check_include(include)
    return tuple(include)


def check_include(include: Sequence[str]) -> None:
    """An ``include`` (of a create, or a read's query): each entry one of the values the
    hosted API takes (:data:`INCLUDABLE`), refused by name otherwise, as hosted; those the
    gateway has nothing for change nothing."""
    for index, entry in enumerate(include):
        if not entry:
            raise InvalidRequest(
                "Include entries must be non-empty.",
                param=f"include[{index}]",
                code="invalid_value",
            )
        if entry not in INCLUDABLE:
            raise unsupported_value(f"include[{index}]", entry, INCLUDABLE)
