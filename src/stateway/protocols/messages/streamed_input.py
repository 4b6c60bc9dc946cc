"""A ``tool_use`` block's input as a stream sends it: the call's argument fragments as
``input_json_delta`` events, while what they add up to can still be a JSON object.

The SDK parses the fragments it has after each one (partially: ``jiter``'s
``partial_mode``) and raises on any that cannot begin a JSON object, ending the client's
stream. An open model's arguments (a Chat or Responses upstream's) need not be JSON at
all, so fragments after which they could not be an object are held back, with all that
follows them: a call none of whose arguments went out gets them at its end as the
non-streamed answer has them (:func:`.encode.tool_input`: ``{"arguments": ...}`` for
arguments that are no object); one that had begun keeps the object begun (the SDK makes
what it can of it). Arguments that are only whitespace so far wait for more, which the
SDK could not parse either.

Each check parses all the arguments so far, so fragments are checked (and sent) once
they add a quarter to what went out: long arguments (a file a call writes) are parsed a
few times over, not once for each of their many fragments.
"""

from __future__ import annotations

from pydantic_core import from_json


class StreamedInput:
    """One call's arguments, and how much of them went out."""

    __slots__ = ("arguments", "broken", "said")

    def __init__(self) -> None:
        self.arguments = ""
        """Every fragment so far."""
        self.said = 0
        """How much of them was sent: always the beginning of a JSON object."""
        self.broken = False
        """Whether the arguments stopped being the beginning of a JSON object."""

    def feed(self, fragment: str) -> str:
        """What to send now, given one more fragment: the fragments held, or nothing."""
        self.arguments += fragment
        if len(self.arguments) - self.said <= self.said // 4:
            return ""
        return self._release()

    def finish(self) -> str:
        """What to send of the fragments held as the call ends (nothing once the
        arguments stopped beginning an object)."""
        return self._release()

    def unsaid(self) -> bool:
        """Whether the call has arguments of which nothing went out."""
        return not self.said and bool(self.arguments)

    def _release(self) -> str:
        if self.broken or not self.arguments.strip():
            return ""
        if not _object_begun(self.arguments):
            self.broken = True
            return ""
        out, self.said = self.arguments[self.said :], len(self.arguments)
        return out


def _object_begun(text: str) -> bool:
    """Whether ``text`` is (the beginning of) a JSON object, as the SDK parses it."""
    try:
        parsed = from_json(text, allow_partial=True)
    except ValueError:
        return False
    return isinstance(parsed, dict)
