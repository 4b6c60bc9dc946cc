"""``thread`` on ``POST /v1/messages`` (and its ``count_tokens``): server-held
conversation state (Anthropic's Threads), decoded into the
:class:`~stateway.core.commands.ThreadTurn` the core runs as a turn of a conversation
(:mod:`stateway.core.threads`, ADR 0017).

- ``{"type": "create"}``: the response is stored, and the thread held under its ``id``.
- ``{"type": "continue", "previous_message_id": "msg_..."}``: ``messages`` holds only the
  new turn (its first message may begin with the results of the calls the previous
  response made); a ``system`` replaces the thread's, and without one the thread's is
  used; likewise ``tools`` (with ``mcp_servers``): declared, they replace the thread's,
  omitted (as Claude Code omits them), the thread's are offered. A ``tool_choice`` naming
  a tool is then judged against the tools inherited, by the core.

Nothing else a request may ask is refused with a thread: thinking, ``cache_control``,
``context_management``, any model (a continue may name another one) all work as without
one, so ``thread_unsupported_request`` and ``thread_fingerprint_mismatch`` are never
answered. A ``previous_message_id`` that is no message id is ``thread_not_found``, as any
other the tenant has no thread state for. ``POST /v1/messages/count_tokens`` takes
``thread`` too, and counts what its turn would send (the thread's earlier turns included).
"""

from __future__ import annotations

from typing import Any

from stateway.core.commands import ThreadTurn
from stateway.core.errors import ThreadNotFound
from stateway.core.threads import response_id
from stateway.protocols.messages.errors import field_error

CREATE = "create"
CONTINUE = "continue"


def decode_thread(thread: dict[str, Any], *, tools_given: bool) -> ThreadTurn:
    """The thread turn a request's ``thread`` asks for; ``tools_given``: whether the
    request declares tools (``tools`` or ``mcp_servers``)."""
    kind = thread.get("type")
    if kind is None:
        raise field_error("thread.type", "Field required", "missing_required_parameter")
    if kind == CREATE:
        return ThreadTurn()
    if kind != CONTINUE:
        raise field_error(
            "thread.type", f"Input should be '{CREATE}' or '{CONTINUE}', not {kind!r}."
        )
    previous = thread.get("previous_message_id")
    if previous is None:
        raise field_error(
            "thread.previous_message_id", "Field required", "missing_required_parameter"
        )
    if not isinstance(previous, str):
        raise field_error("thread.previous_message_id", "Input should be a string", "invalid_type")
    named = response_id(previous)
    if named is None:
        raise ThreadNotFound(previous)
    return ThreadTurn(previous_response_id=named, tools_given=tools_given)
