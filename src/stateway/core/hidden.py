"""Hidden rounds: what a client whose API cannot show the gateway's own tools sees of a run.

Chat Completions and Messages clients can neither declare nor show ``mcp`` or
``web_search`` tools. A backend's configured ``gateway_tools`` are offered to them anyway
(:attr:`~stateway.core.commands.CreateResponse.hidden_rounds`): the loop runs those calls
in rounds of their own, exactly as for a Responses client, and the run's output and events
keep every item. Their encoders show only the :func:`visible` items: assistant messages
(the text of every round, in order), reasoning, and the client's own function calls (and
custom tool calls, which a Chat client may declare). The
gateway's items (``mcp_list_tools``, ``mcp_call``, ``web_search_call``, ...) and their
events are left out, and what the client must do next is answer :func:`client_calls`, or
nothing. Usage is the run's, summed over every round.
"""

from __future__ import annotations

from typing import Final

from stateway.core import events as ev
from stateway.core.items import CUSTOM_TOOL_CALL, FUNCTION_CALL, MESSAGE, REASONING, Item

CLIENT_CALLS: Final = frozenset({FUNCTION_CALL, CUSTOM_TOOL_CALL})
"""The types of the calls a client answers."""
VISIBLE: Final = frozenset({MESSAGE, REASONING}) | CLIENT_CALLS
"""The output item types such a client is shown."""


def visible(item: Item) -> bool:
    return item.get("type") in VISIBLE


def shows(event: ev.Event) -> bool:
    """Whether such a client is shown anything of ``event``: not of the gateway's items,
    their progress, or a notice. Until it is, the client has seen no output (a failure is
    then answered with its HTTP error)."""
    match event:
        case ev.ItemAdded(item=item) | ev.ItemDone(item=item):
            return visible(item)
        case (
            ev.ToolProgress()
            | ev.McpArgumentsDelta()
            | ev.McpArgumentsDone()
            | ev.Compacting()
            | ev.Notice()
        ):
            return False
        case _:
            return True


def client_calls(output: list[Item]) -> list[Item]:
    """The calls in ``output`` that the client must answer (its own function and custom
    tool calls)."""
    return [item for item in output if item.get("type") in CLIENT_CALLS]
