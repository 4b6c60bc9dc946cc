"""A Chat upstream's call of a ``custom`` tool (``type: "custom"``, its raw ``input``
under ``custom``, as OpenAI's Chat Completions answers one) read as the call of the
function the gateway offers a custom tool as (:mod:`stateway.core.tools.custom_tools`):
its arguments ``{"input": <the raw input>}``. The core then makes of it what it makes of
that function's call: the client's ``custom_tool_call`` with the very input, or a function
call (a Messages ``tool_use``) of a function so named. Read as a function's call it would
be nameless, with no arguments.

A whole message's call is read whole (:func:`whole_arguments`). A stream's are read in
pieces (:class:`CustomInputs`): the first piece of each opens the JSON, every piece is
escaped as it comes, and the stream's finish closes each call it opened.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from stateway.backends.upstream_values import text
from stateway.core.inference import ToolCallDelta

_OPEN: Final = '{"input":"'
_CLOSE: Final = '"}'


def custom_call(call: dict[str, Any]) -> dict[str, Any] | None:
    """The ``custom`` member of a call that is a custom tool's: it has one and no
    ``function`` (some proxies echo an empty ``custom`` beside a function's)."""
    custom = call.get("custom")
    return custom if type(custom) is dict and call.get("function") is None else None


def whole_arguments(custom: dict[str, Any]) -> str:
    """A whole custom call's input as the offered function's arguments."""
    return orjson.dumps({"input": text(custom.get("input")) or ""}).decode()


class CustomInputs:
    """The custom calls of one stream: each fragment's input as a piece of the offered
    function's arguments (:meth:`piece`); the ends of the calls begun, at the finish
    (:meth:`closing`)."""

    __slots__ = ("_begun",)

    def __init__(self) -> None:
        self._begun: list[int] = []
        """The indexes of the custom calls begun and not yet closed, in order."""

    def piece(self, index: int, call_id: str | None, custom: dict[str, Any]) -> ToolCallDelta:
        """A fragment of the custom call at ``index`` as a fragment of its arguments."""
        escaped = orjson.dumps(text(custom.get("input")) or "").decode()[1:-1]
        if index not in self._begun:
            self._begun.append(index)
            escaped = _OPEN + escaped
        return ToolCallDelta(index, call_id, text(custom.get("name")) or None, escaped)

    def closing(self) -> list[ToolCallDelta]:
        """The last fragment of each custom call begun, closing its arguments."""
        begun, self._begun = self._begun, []
        return [ToolCallDelta(index, None, None, _CLOSE) for index in begun]
