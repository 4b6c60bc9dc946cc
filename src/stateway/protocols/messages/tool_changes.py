"""Mid-conversation tool changes in a Messages request: the ``tool_addition`` and
``tool_removal`` blocks of its ``role: "system"`` messages (Anthropic's
``mid-conversation-tool-changes-2026-07-01`` and ``inline-tools-2026-09-15`` betas; taken
with either header, or none), as the changes :mod:`stateway.core.tools.changes` folds
into the one tool list an upstream is offered.

- ``{"type": "tool_reference", "name": ...}``: a tool declared in ``tools`` (the web
  search server tool by ``web_search``) or defined by an earlier ``tool_addition``;
  naming another is a 400 with ``error.details.error_code`` ``tool_reference_unresolved``,
  judged in order (a tool defined later is not yet defined).
- ``{"type": "tool_definition", "definition": ...}`` (a ``tool_addition`` only): a
  ``tools`` entry of any kind ``tools`` takes here, checked as one is (its errors name it:
  ``messages.N.content.M.tool.definition.input_schema.type``); a definition taking the
  name of a tool of another kind (a custom tool named ``web_search`` beside the server
  tool) is ``tool_name_conflict``. ``cache_control`` goes on the block or in the
  definition, not both, and not in a deferred one, as Anthropic refuses them.
- The MCP connector's references (``mcp_tool_reference``, ``mcp_toolset_reference``) and
  an ``mcp_toolset`` defined in a message are refused by name: declare the toolset in
  ``tools``; so is a tool search tool defined in a message (in ``tools`` it changes
  nothing: :mod:`.tool_declarations`).
- A turn-scoped system message (``clear_at: "next_user_message"``) carries no tool
  change, in Anthropic's words.

What the model is offered is folded, whatever the upstream: an Anthropic upstream, too,
gets the tools in effect as its ``tools`` and no change blocks (the gateway's Anthropic
backend may front a Messages server that takes no such beta, and a tool defined by value
must be in the gateway's catalog for its calls to come back as the client's). A block's
``cache_control`` is kept on the message's part before it (:mod:`.content`). Tools declared
with ``defer_loading`` are offered as any other, as without tool changes
(:mod:`.content`): an addition of one changes nothing, a removal withdraws it.
"""

from __future__ import annotations

from stateway.core.tools.changes import ToolChange, tool_name
from stateway.protocols.messages.blocks import (
    McpToolChangeReference,
    McpToolsetChangeReference,
    ToolAdditionBlock,
    ToolChangeBlock,
    ToolChangeReference,
    ToolRemovalBlock,
)
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.request import MessageParam
from stateway.protocols.messages.tool_declarations import decode_definition

TURN_SCOPED = "next_user_message"
"""A system message's ``clear_at`` that shows it for one turn only."""


def decode_tool_changes(messages: list[MessageParam]) -> list[ToolChange]:
    """The tool changes of ``messages`` (the body's, whose indices errors name), in order."""
    changes: list[ToolChange] = []
    for index, message in enumerate(messages):
        if message.role != "system" or isinstance(message.content, str):
            continue
        for position, block in enumerate(message.content):
            if not isinstance(block, ToolAdditionBlock | ToolRemovalBlock):
                continue
            if message.clear_at == TURN_SCOPED:
                raise field_error(
                    f"messages.{index}",
                    "a turn-scoped system message supports text blocks only "
                    f"(clear_at: '{TURN_SCOPED}')",
                )
            changes.append(_change(block, ("messages", index, "content", position)))
    return changes


def _change(block: ToolChangeBlock, at: tuple[int | str, ...]) -> ToolChange:
    where = ".".join(map(str, at))
    target = block.tool
    if isinstance(target, McpToolChangeReference | McpToolsetChangeReference):
        raise field_error(
            f"{where}.tool.type",
            f"'{target.type}' is not supported: the gateway changes no MCP connector "
            "server's tools mid-conversation; declare its mcp_toolset in tools.",
        )
    removed = isinstance(block, ToolRemovalBlock)
    if isinstance(target, ToolChangeReference):
        return ToolChange(f"{where}.tool.name", target.name, removed=removed)
    raw = target.definition
    definition = decode_definition(raw, (*at, "tool", "definition"))
    if "cache_control" in raw and block.cache_control is not None:
        raise field_error(
            f"{where}.cache_control",
            "cache_control goes on the block or in its tool's definition, not both.",
        )
    if "cache_control" in raw and raw.get("defer_loading") is True:
        raise field_error(
            f"{where}.tool.definition.cache_control",
            "a deferred tool's definition cannot carry cache_control.",
        )
    name = tool_name(definition)
    assert name is not None  # a function's or the web search tool's
    return ToolChange(f"{where}.tool.definition.name", name, definition=definition)
