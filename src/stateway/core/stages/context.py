"""The stage points and the per-call context a stage method is handed.

A stage is any object with a method named after a point (sync or async), taking one
positional argument: the :class:`StageContext`. Points run in this order:

``session_open``        the first turn of a chain or conversation (labels, metadata)
``submit_request``      every request, before anything else
``tool_catalog_filter`` which tools the model may see (edit ``context.tools``: every tool
                        it would be offered, however it came)
``request_shaping``     whole-call transforms (``context.command``: instructions,
                        settings such as ``max_output_tokens``)
``route_hinting``       advisory candidate preferences (add backend names to
                        ``context.hints``)
``response_part``       each output item once its round ends (``context.item``)
``completion_gate``     before a completed response is stored and announced; raising
                        fails it (``context.state``)

The first five run before the route is planned; the last two around each round.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from stateway.core.commands import CreateResponse
from stateway.core.items import Item

POINTS: Final = (
    "session_open",
    "submit_request",
    "tool_catalog_filter",
    "request_shaping",
    "route_hinting",
    "response_part",
    "completion_gate",
)
MUTATING: Final = frozenset(
    {"session_open", "submit_request", "tool_catalog_filter", "request_shaping"}
)
"""Points after which the command is re-validated."""


@dataclass(slots=True)
class StageContext:
    point: str
    route: str
    command: CreateResponse | None = None
    """The request (``None`` at ``response_part`` and ``completion_gate``)."""
    tools: list[Item] = field(default_factory=list)
    """``tool_catalog_filter``: the declared tools, then those the context's items offer
    beyond them (earlier turns' ``additional_tools``, the tools a search loaded: its
    ``tool_search_output``); what is left is offered, the rest withheld."""
    hints: list[str] = field(default_factory=list)
    """``route_hinting``: backend names to try first within their tier."""
    item: Item | None = None
    """``response_part``: the output item."""
    state: Any = None
    """``completion_gate``: the response's state (``ResponseState``), read-only."""
    labels: dict[str, str] = field(default_factory=dict)
    """Shared by the stages of one call."""
    counting: bool = False
    """Whether the call only counts the request's input tokens (``input_tokens``,
    ``count_tokens``): the request-side points run on it as on a run, so that it counts
    what a run would send; nothing is generated or stored, and a stage with effects
    beyond the request (a session opened, a quota charged) skips them."""
