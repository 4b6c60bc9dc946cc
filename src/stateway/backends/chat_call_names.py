"""A streamed call's name made whole, as Chat upstreams send it: once on the call's first
fragment (most), in pieces over its fragments (Gemini's OpenAI-compatible endpoint:
``edit_ex`` then ``isting_file``, continuedev/continue#5849), or whole again on each of
them (older llama-server, ggml-org/llama.cpp#13774, some proxies). The core opens a call
with the first name it sees, so the opening fragment is held while the call's arguments
are still empty, and its later name pieces are joined to it.

Made by the streaming loop at a stream's first call fragment only: text streams pass by
without it.
"""

from __future__ import annotations

from stateway.core.inference import Delta, ToolCallDelta


class CallNames:
    """Holds a call's opening fragment while its ``arguments`` are empty, joining the
    names of its later fragments (:func:`joined`); lets it go, whole, with the first
    fragment of that call that has arguments, before any other delta (another call's
    fragment, text, the ``Finish``), or at the stream's end (:meth:`release`). The
    fragments after that pass as they come."""

    __slots__ = ("_held", "_opened")

    def __init__(self) -> None:
        self._held: ToolCallDelta | None = None
        self._opened: set[int] = set()
        """The indexes of the calls whose opening fragment has come."""

    def feed(self, delta: Delta) -> tuple[Delta, ...]:
        """The deltas to pass on now that ``delta`` came (none while a call is held)."""
        held = self._held
        if type(delta) is ToolCallDelta:
            if held is not None and held.index == delta.index:
                return self._joined(held, delta)
            if delta.index not in self._opened:
                self._opened.add(delta.index)
                if not delta.arguments:
                    self._held = delta
                    return () if held is None else (held,)
        if held is None:
            return (delta,)
        self._held = None
        return (held, delta)

    def release(self) -> tuple[Delta, ...]:
        """The held call, at the stream's end."""
        held, self._held = self._held, None
        return () if held is None else (held,)

    def _joined(self, held: ToolCallDelta, delta: ToolCallDelta) -> tuple[Delta, ...]:
        whole = ToolCallDelta(
            held.index,
            held.call_id or delta.call_id,
            joined(held.name, delta.name),
            delta.arguments,  # the held call's are empty
        )
        if not delta.arguments:
            self._held = whole
            return ()
        self._held = None
        return (whole,)


def joined(name: str | None, piece: str | None) -> str | None:
    """A call's ``name`` so far with a later fragment's ``piece`` of it: the same name
    again is a repeat; one that starts with it is the name so far, grown; any other
    piece follows it."""
    if not piece or piece == name:
        return name
    if not name or piece.startswith(name):
        return piece
    return name + piece
