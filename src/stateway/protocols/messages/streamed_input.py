"""A ``tool_use`` block's input as a stream sends it: the call's argument fragments as
``input_json_delta`` events, while what they add up to can still be a JSON object.

The SDK parses the fragments it has after each one (partially: ``jiter``'s
``partial_mode``) and raises on any that cannot begin a JSON object, ending the client's
stream. An open model's arguments (a Chat or Responses upstream's) need not be JSON at
all, so a fragment after which they could not be an object is held back, with all that
follows it: a call none of whose arguments went out gets them at its end as the
non-streamed answer has them (:func:`.encode.tool_input`: ``{"arguments": ...}`` for
arguments that are no object); one that had begun keeps the object begun (the SDK makes
what it can of it). Arguments that are only whitespace so far wait for more, which the
SDK could not parse either.
"""

from __future__ import annotations

from pydantic_core import from_json


class StreamedInput:
    """One call's arguments, and how much of them went out."""

    __slots__ = ("arguments", "broken", "said")

    def __init__(self) -> None:
        self.arguments = ""
        """Every fragment so far."""
        self.said = ""
        """The fragments sent: always the beginning of a JSON object."""
        self.broken = False
        """Whether the arguments stopped being the beginning of a JSON object."""

    def feed(self, fragment: str) -> str:
        """What to send of ``fragment`` (with any whitespace held before it): all of it, or
        nothing."""
        self.arguments += fragment
        if self.broken or not self.arguments.strip():
            return ""
        if not _object_begun(self.arguments):
            self.broken = True
            return ""
        out, self.said = self.arguments[len(self.said) :], self.arguments
        return out

    def unsaid(self) -> bool:
        """Whether the call's arguments are to be sent whole at its end: there are some,
        and none went out (else the fragments sent are the input)."""
        return not self.said and bool(self.arguments)


def _object_begun(text: str) -> bool:
    """Whether ``text`` is (the beginning of) a JSON object, as the SDK parses it."""
    try:
        parsed = from_json(text, allow_partial=True)
    except ValueError:
        return False
    return isinstance(parsed, dict)
