"""Tool changes mid-conversation: a tool offered, or withdrawn, from a point of the
conversation on (Anthropic's ``tool_addition`` and ``tool_removal`` blocks), folded into
the one tool list every upstream is offered.

An upstream takes one ``tools`` list for the whole request, and the model answers at the
end of the conversation, so what it is offered is what is in effect there
(:func:`tools_in_effect`): the declared tools, less those a change withdrew, plus those
a change added, the changes taken in the order they come. A tool is named by the name
the model calls it by (the web search server tool by ``web_search``; an MCP server's
tools by no name: the gateway lists them itself). A reference must name a tool defined
at its point: declared, or defined by an earlier change (withdrawn or not); another is
refused (:class:`~stateway.core.errors.ToolReferenceUnresolved`). An addition may instead
carry a tool's definition by value: a new tool, or a new definition of one it names,
which replaces the earlier one from there on, unless it is a tool of another kind (a
client's function in place of the web search server tool, or the reverse:
:class:`~stateway.core.errors.ToolNameConflict`).

The offered list keeps the declared tools in their order (a tool withdrawn and added
again, or defined again, comes back where it was declared), then the tools defined by
value in the order they were first defined: a conversation that goes on with the same
changes is offered the same list, byte for byte, which keeps a model server's prefix
cache. Earlier calls of a withdrawn tool stay in the context as they were, each with its
output: a model sees what it did, and a chat template renders a call whether or not its
tool is still offered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from stateway.core.errors import ToolNameConflict, ToolReferenceUnresolved
from stateway.core.items import Item
from stateway.core.tools.tool_types import CUSTOM, WEB_SEARCH_TYPES

WEB_SEARCH: Final = "web_search"
"""The name the web search server tool is referenced by."""
_KIND_WORDS: Final = {WEB_SEARCH: "server", "function": "client", CUSTOM: "client"}


@dataclass(frozen=True, slots=True)
class ToolChange:
    """One tool added or withdrawn from a point of the conversation on."""

    param: str
    """Where the change names its tool (a block's ``tool.name``): what a refusal names."""
    name: str
    """The tool it references, or the one its definition defines."""
    removed: bool = False
    definition: Item | None = None
    """An addition's tool by value (a declared tool's canonical shape); None: by name."""


def tools_in_effect(tools: list[Item], changes: Sequence[ToolChange]) -> list[Item]:
    """``tools`` with ``changes`` applied in order: what is offered at the end."""
    if not changes:
        return tools
    known: dict[str, Item] = {}
    """Every tool defined so far by its name, in the order first defined."""
    for tool in tools:
        name = tool_name(tool)
        if name is not None:
            known.setdefault(name, tool)
    withdrawn: set[str] = set()
    for change in changes:
        if change.definition is not None:
            earlier = known.get(change.name)
            if earlier is not None and _kind(earlier) != _kind(change.definition):
                raise ToolNameConflict(
                    change.name, _KIND_WORDS.get(_kind(earlier), "client"), param=change.param
                )
            known[change.name] = change.definition
        elif change.name not in known:
            raise ToolReferenceUnresolved(change.name, param=change.param)
        if change.removed:
            withdrawn.add(change.name)
        else:
            withdrawn.discard(change.name)
    offered: list[Item] = []
    for tool in tools:  # where declared, as defined last
        name = tool_name(tool)
        current = tool if name is None else known.pop(name, None)
        if current is not None and name not in withdrawn:
            offered.append(current)
    offered += [tool for name, tool in known.items() if name not in withdrawn]
    return offered


def tool_name(tool: Item) -> str | None:
    """The name a change references ``tool`` by; None for a kind named otherwise."""
    kind = tool.get("type")
    if kind in WEB_SEARCH_TYPES:
        return WEB_SEARCH
    if kind in ("function", CUSTOM) and isinstance(tool.get("name"), str):
        return str(tool["name"])
    return None


def _kind(tool: Item) -> str:
    """A tool's kind: a definition replacing it must be of the same (any version of it)."""
    kind = tool.get("type")
    return WEB_SEARCH if kind in WEB_SEARCH_TYPES else str(kind)
