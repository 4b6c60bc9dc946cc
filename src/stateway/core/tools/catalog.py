"""The model-visible tool catalog.

Clients declare tools in their public shapes; an upstream model only ever sees function
tools. :func:`model_tools` flattens the declared tools into that function list,
:func:`model_items` rewrites a context's items into what the model saw, and a
:class:`Catalog` maps a model's call back to the public item the client gets.

- ``function``: as declared.
- ``namespace``: each member becomes the function ``<namespace>__<member>``; its calls come
  back as ``function_call`` items with the member's ``name`` and a ``namespace`` field.
  Declared names must not collide after flattening (the decoder checks).
- Tools of an ``additional_tools`` input item count as declared at the top level (the
  decoder adds the request's own; :func:`with_context_tools` those of earlier turns).
- ``custom`` (freeform input): a function with one string argument ``input``; its calls
  come back as ``custom_tool_call`` items with ``input`` as the raw string, and a
  ``custom_tool_call_output`` reaches the model as a function call output. A grammar
  ``format`` is described to the model in the function's description, and is also enforced
  by guided decoding on a backend that has it (:meth:`Catalog.forced_grammar`).
- ``shell`` / ``local_shell`` (when the upstream does not speak Responses natively): the
  function of the same name (:mod:`stateway.core.tools.shell`); its calls come back as
  ``shell_call`` / ``local_shell_call`` items.

Gateway-owned kinds (``web_search``, ``mcp``) have no provider yet: a ``web_search`` tool
sent as an optional hint (``external_web_access: false``, as Codex sends it) is dropped when
the request is decoded, so it is neither offered to the model nor echoed in ``tools``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from stateway.core.items import Item
from stateway.core.tools import shell

WEB_SEARCH_TYPES: Final = frozenset({"web_search", "web_search_preview", "web_search_2025_08_26"})
NAMESPACE: Final = "namespace"
CUSTOM: Final = "custom"
ADDITIONAL_TOOLS: Final = "additional_tools"
"""An input item (role ``developer``) whose ``tools`` join the request's declared tools.
It stays in the stored context as sent and never reaches a model as a message."""
INPUT_SCHEMA: Final[Item] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The tool's raw input."}},
    "required": ["input"],
    "additionalProperties": False,
}
"""The parameters of the function a ``custom`` tool is offered as."""
_OFFERED: Final = frozenset({"function", CUSTOM, NAMESPACE})
SEPARATOR: Final = "__"


def model_name(name: str, namespace: str | None = None) -> str:
    """The function name the model sees for a tool (or a namespace's member)."""
    return f"{namespace}{SEPARATOR}{name}" if namespace else name


def model_tools(tools: list[Item]) -> list[Item]:
    """The declared tools as the function tools the model is offered."""
    return Catalog(tools).model_tools()


def with_context_tools(tools: list[Item], context: list[Item]) -> list[Item]:
    """The declared tools plus those of ``additional_tools`` items in the context (earlier
    turns of a ``previous_response_id`` chain) whose names are not declared already."""
    names = {_visible(tool, ns) for tool, ns in _members(tools)}
    out = list(tools)
    for item in context:
        if item.get("type") != ADDITIONAL_TOOLS:
            continue
        for tool in item.get("tools") or ():
            if not isinstance(tool, dict) or tool.get("type") not in _OFFERED:
                continue  # e.g. a web_search hint: never offered
            members = {model_name(member["name"], ns) for member, ns in _members([tool])}
            if not members & names:
                names |= members
                out.append(tool)
    return out


Kind = Literal["function", "custom", "mcp", "web_search", "shell", "local_shell"]


@dataclass(slots=True, frozen=True)
class Entry:
    """One model-visible function and what its calls become."""

    kind: Kind
    function: Item
    """The function tool the model is offered."""
    tool: Item
    """The declared public tool (a namespace's member for members)."""
    namespace: str | None = None
    server_label: str | None = None
    """An MCP tool's server."""
    name: str | None = None
    """An MCP tool's name on its server."""
    approval: bool = False
    """Whether an MCP call must be approved by the client before it runs."""
    parallel_safe: bool = True
    """Whether two calls of it may run at once."""

    @property
    def gateway_owned(self) -> bool:
        return self.kind in ("mcp", "web_search")


class Catalog:
    """One request's model-visible names, mapped back to the public tools: the declared
    client tools, then the gateway's (MCP tools as they are discovered, web search)."""

    __slots__ = ("_by_name",)

    def __init__(self, tools: list[Item]) -> None:
        self._by_name: dict[str, Entry] = {}
        for tool, namespace in _members(tools):
            kind: Kind = "function"
            if tool.get("type") == CUSTOM:
                kind = "custom"
            elif tool.get("type") == shell.SHELL:
                kind = "shell"
            elif tool.get("type") == shell.LOCAL_SHELL:
                kind = "local_shell"
            function = _function(tool, namespace)
            self._by_name[function["name"]] = Entry(kind, function, tool, namespace)

    def add(self, entry: Entry) -> bool:
        """Offer a gateway tool; False (and not offered) when its name is taken."""
        name = entry.function["name"]
        if name in self._by_name:
            return False
        self._by_name[name] = entry
        return True

    def entry(self, name: str) -> Entry | None:
        return self._by_name.get(name)

    def model_tools(self, *, gateway: bool = True) -> list[Item]:
        """The functions offered to the model; ``gateway=False`` leaves the gateway's out
        (once a response has used up its ``max_tool_calls``)."""
        return [e.function for e in self._by_name.values() if gateway or not e.gateway_owned]

    def model_choice(self, choice: str | dict[str, Any]) -> str | dict[str, Any]:
        """A ``tool_choice`` in model-visible names: a named function, custom, MCP or web
        search tool becomes ``{"type": "function", "name": <model-visible>}``; an MCP
        choice without a name, ``required``. A name not offered falls back to ``auto``."""
        if isinstance(choice, str):
            return choice
        kind = choice.get("type")
        if kind == "allowed_tools":  # the set is not narrowed upstream; its mode is kept
            return str(choice.get("mode", "auto"))
        name = choice.get("name")
        if kind in WEB_SEARCH_TYPES:
            wanted = [e for e in self._by_name.values() if e.kind == "web_search"]
        elif kind in shell.TOOL_TYPES:
            wanted = [e for e in self._by_name.values() if e.kind == kind]
        elif kind == "mcp":
            label = choice.get("server_label")
            wanted = [
                e
                for e in self._by_name.values()
                if e.kind == "mcp" and e.server_label == label and (name is None or e.name == name)
            ]
            if name is None and wanted:
                return "required"
        else:
            flat = model_name(name or "", choice.get("namespace"))
            found = self._by_name.get(flat)
            wanted = [found] if found is not None else []
        if not wanted:
            return "auto"
        return {"type": "function", "name": wanted[0].function["name"]}

    def forced_grammar(self, choice: str | dict[str, Any]) -> Item | None:
        """The grammar ``format`` of the custom tool a model-visible ``choice`` forces, if
        it forces one that has a grammar (for backends with guided decoding)."""
        if not isinstance(choice, dict):
            return None
        found = self._by_name.get(str(choice.get("name")))
        if found is None or found.kind != "custom":
            return None
        fmt = found.tool.get("format")
        return fmt if isinstance(fmt, dict) and fmt.get("type") == "grammar" else None

    def is_custom(self, name: str) -> bool:
        """Whether the model-visible ``name`` is a ``custom`` tool's."""
        found = self._by_name.get(name)
        return found is not None and found.kind == "custom"

    def public_call(self, item: Item) -> Item:
        """A call item as the client gets it (in place): a namespace member's call gets the
        member's name and its ``namespace``. Unknown names stay as the model gave them."""
        if "namespace" in item:
            return item  # restored already
        found = self._by_name.get(item.get("name", ""))
        if found is not None and found.namespace is not None:
            item["name"] = found.tool["name"]
            item["namespace"] = found.namespace
        return item


def _members(tools: list[Item]) -> Iterator[tuple[Item, str | None]]:
    for tool in tools:
        if tool.get("type") == NAMESPACE:
            for member in tool.get("tools", ()):
                yield member, tool["name"]
        else:
            yield tool, None


def _visible(tool: Item, namespace: str | None) -> str:
    if tool.get("type") in shell.TOOL_TYPES:
        return str(tool["type"])
    return model_name(tool["name"], namespace)


def _function(tool: Item, namespace: str | None) -> Item:
    if tool.get("type") in shell.TOOL_TYPES:
        return shell.function(tool)
    function: Item = {"type": "function", "name": model_name(tool["name"], namespace)}
    if tool.get("type") == CUSTOM:
        function["description"] = _custom_description(tool)
        function["parameters"] = INPUT_SCHEMA
        return function
    for key in ("description", "parameters", "strict"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return function


def _custom_description(tool: Item) -> str:
    text = tool.get("description") or ""
    fmt = tool.get("format") or {}
    if fmt.get("type") == "grammar":
        text += (
            f"\n\nThe 'input' argument is raw text (not JSON) that must match this "
            f"{fmt.get('syntax', '')} grammar:\n{fmt.get('definition', '')}"
        )
    else:
        text += "\n\nThe 'input' argument is free-form raw text."
    return text.strip()


def custom_input(arguments: str) -> str:
    """A custom tool call's raw input from the model's function arguments: the ``input``
    string, or (a model that ignored the schema) the arguments as they are."""
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    value = parsed.get("input") if isinstance(parsed, dict) else None
    return value if isinstance(value, str) else arguments
