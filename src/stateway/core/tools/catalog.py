"""The model-visible tool catalog.

Clients declare tools in their public shapes; an upstream model only ever sees function
tools. :func:`model_tools` flattens the declared tools into that function list,
:func:`model_items` rewrites a context's items into what the model saw, and a
:class:`Catalog` maps a model's call back to the public item the client gets.

- ``function``: as declared.
- ``namespace``: each member becomes the function ``<namespace>__<member>``; its calls come
  back as ``function_call`` items with the member's ``name`` and a ``namespace`` field.
  Declared names must not collide after flattening (the decoder checks). So do an MCP
  server's tools (``<server_label>__<tool>``). A flattened name that strict model APIs
  would refuse (OpenAI's function names are ``[A-Za-z0-9_-]``, at most 64 characters; an
  MCP tool may be called ``files.read``) is offered as a respelling ending in a hash of
  it (:mod:`.model_names`), the same in every turn, and mapped back like any other.
- Tools of an ``additional_tools`` input item count as declared at the top level (the
  decoder adds the request's own; :func:`.context_offers.with_context_tools` those of earlier
  turns).
- ``custom`` (freeform input): a function with one string argument ``input``; its calls
  come back as ``custom_tool_call`` items with ``input`` as the raw string, and a
  ``custom_tool_call_output`` reaches the model as a function call output. A grammar
  ``format`` is described to the model in the function's description, and is also enforced
  by guided decoding on a backend that has it (:meth:`Catalog.forced_grammar`).
- ``shell`` / ``local_shell`` / ``apply_patch`` (when the upstream does not speak Responses
  natively): the function of the same name (:mod:`stateway.core.tools.client_hosted`); its
  calls come back as ``shell_call`` / ``local_shell_call`` / ``apply_patch_call`` items.

Gateway-owned kinds (``web_search``, ``mcp``) and ``tool_search``: a ``web_search`` tool
sent as an optional hint (``external_web_access``, as Codex sends it) to a gateway without a
search provider is dropped when the request is decoded, so it is neither offered to the
model nor echoed in ``tools``. Each is added after the client's tools (:meth:`Catalog.add`)
under its usual name, or apart beside a tool that has it (``gateway_web_search``,
``gateway_docs__add``: :func:`.model_names.apart_name`), never in a client tool's place;
:meth:`Catalog.names` says which, for the calls of earlier turns.

Tool search (:mod:`stateway.core.tools.tool_search`): when a request declares a
``tool_search`` tool, functions marked ``defer_loading: true`` (or every member of a namespace
so marked) are *deferred*: known to the catalog, not offered, until a search loads them.
Without a ``tool_search`` tool the flag means nothing and they are offered as usual. The
tools of ``tool_search_output`` items in the context (earlier searches, or the client's
answer to its own search) are offered from then on (:mod:`.context_offers`; a route's
feature stages are shown them beside the declared tools), until a compaction summarizes
them away (:meth:`Catalog.reoffer`). A call of
a deferred function of no namespace comes back with the ``namespace`` of its own name, as
hosted gives it (:meth:`Catalog.public_call`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Final, Literal

from stateway.core.items import Item
from stateway.core.tools import client_hosted, custom_tools
from stateway.core.tools.allowed_tools import Allowed
from stateway.core.tools.model_names import GatewayNames, apart_name, model_name
from stateway.core.tools.search_output import loaded, loaded_servers
from stateway.core.tools.tool_types import (
    CUSTOM,
    DEFER,
    NAMESPACE,
    TOOL_SEARCH,
    WEB_SEARCH_TYPES,
    search_execution,
)


def model_tools(tools: list[Item]) -> list[Item]:
    """The declared tools as the function tools the model is offered."""
    return Catalog(tools).model_tools()


Kind = Literal[
    "function", "custom", "mcp", "web_search", "shell", "local_shell", "apply_patch", "tool_search"
]
_KINDS: Final[dict[object, Kind]] = {
    CUSTOM: "custom",
    "shell": "shell",
    "local_shell": "local_shell",
    "apply_patch": "apply_patch",
}
"""The kind of each declared client tool type but ``function``."""


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
    read_only: bool = False
    """An MCP tool its server marks read-only (``readOnlyHint``)."""
    parallel_safe: bool = True
    """Whether two calls of it may run at once."""
    deferred: bool = False
    """Declared with ``defer_loading``: not offered until a tool search loads it."""
    searched: bool = False
    """A function of no namespace declared with ``defer_loading`` (a ``tool_search`` tool
    declared), loaded since or not: hosted gives its calls the ``namespace`` of its own name
    (:meth:`Catalog.public_call`)."""
    refusal: str | None = None
    """Why a call of it is not run: a tool of a declared MCP server that this request does
    not offer (not listed, not allowed), which the model called anyway."""

    @property
    def gateway_owned(self) -> bool:
        if self.kind == "tool_search":
            return search_execution(self.tool) == "server"
        return self.kind in ("mcp", "web_search")


class Catalog:
    """One request's model-visible names, mapped back to the public tools: the declared
    client tools (deferred ones held back), then the gateway's (MCP tools as they are
    discovered, web search, tool search) and the tools searches load."""

    __slots__ = ("_allowed", "_by_name", "_forced_server", "_gateway", "namespaces")

    def __init__(self, tools: list[Item], *, defer: bool = False) -> None:
        """``defer``: a ``tool_search`` tool is declared, so ``defer_loading`` counts."""
        self._by_name: dict[str, Entry] = {}
        self._gateway: dict[str, str] = {}
        """Each gateway tool's usual name -> the name it is offered by (:meth:`add`)."""
        self.namespaces: dict[str, Item] = {}
        """The declared (or loaded) namespaces by name, for their descriptions."""
        self._allowed: list[Item] | None = None
        """An ``allowed_tools`` choice's tools: only the entries they name are offered."""
        self._forced_server: str | None = None
        """The label of the MCP server a choice forces a tool of: a round forced
        (``required``) is offered only that server's tools."""
        self._offer(tools, defer=defer)

    def load(self, tools: list[Item]) -> list[str]:
        """Offer the tools a search loaded (:func:`.search_output.loaded`, and
        :meth:`load_mcp`); the model-visible names newly offered."""
        return self._offer(loaded(tools), defer=False) + self.load_mcp(tools)

    def load_mcp(self, tools: Iterable[Any]) -> list[str]:
        """Offer the deferred tools of MCP servers that ``tools`` (a search's) load: an
        ``mcp`` entry names its server by ``server_label`` and the tools loaded by
        ``allowed_tools`` (:class:`.search_output.Loaded`); the model-visible names newly
        offered. What names no deferred tool of a declared server loads nothing."""
        offered = []
        for label, loads in loaded_servers(tools).items():
            for name, e in self._by_name.items():
                held = e.kind == "mcp" and e.deferred and e.server_label == label
                if held and any(load.loads(e.name, e.read_only) for load in loads):
                    self._by_name[name] = replace(e, deferred=False)
                    offered.append(name)
        return offered

    def hold_back(self, labels: Iterable[str]) -> None:
        """Hold back again the tools of the MCP servers ``labels`` names (each declared
        ``defer_loading``) that a search loaded: a compaction summarized its output away,
        until a search in the compacted context loads them (:meth:`load_mcp`)."""
        servers = frozenset(labels)
        for name, e in self._by_name.items():
            if e.kind == "mcp" and e.server_label in servers:
                self._by_name[name] = replace(e, deferred=True)

    def renew(self, entry: Entry) -> None:
        """Put ``entry`` in the place of the gateway tool of its usual name, offered by the
        same name (the tool search's, once an MCP server's tools are held back too)."""
        name = self._gateway.get(entry.function["name"])
        if name is not None:
            self._by_name[name] = _named(entry, name)

    def deferred(self) -> list[Entry]:
        """The tools a search may still load, in declaration order."""
        return [e for e in self._by_name.values() if e.deferred]

    def _offer(self, tools: list[Item], *, defer: bool) -> list[str]:
        """Add each tool; a name already known is kept as it is, unless it is deferred and
        this definition is not (then it is loaded). No gateway tool holds a name a load
        brings: the client's tools, deferred ones among them, are known first, and a
        gateway tool goes apart from them (:meth:`add`)."""
        offered = []
        for tool, namespace in members(tools):
            if namespace is not None and namespace not in self.namespaces:
                self.namespaces[namespace] = _namespace_of(tools, namespace)
            kind = _KINDS.get(tool.get("type"), "function")
            function = _function(tool, namespace)
            name = function["name"]
            known = self._by_name.get(name)
            group = self.namespaces.get(namespace) if namespace is not None else None
            deferred = defer and (tool.get(DEFER) is True or (group or {}).get(DEFER) is True)
            if known is not None and (not known.deferred or deferred):
                continue
            if known is not None:  # a deferred tool loaded: as it was declared
                searched = known.searched
            else:
                searched = deferred and kind == "function" and namespace is None
            self._by_name[name] = Entry(
                kind, function, tool, namespace, deferred=deferred, searched=searched
            )
            if not deferred:
                offered.append(name)
        return offered

    def add(self, entry: Entry) -> bool:
        """Offer a gateway tool (its function named as usual: :mod:`.model_names`) under
        that name, or apart (:func:`.model_names.apart_name`) when another tool has it; False
        (and not offered) when a gateway tool of the same usual name already is (a server
        listing a name twice)."""
        usual = entry.function["name"]
        if usual in self._gateway:
            return False
        name = apart_name(usual, self._by_name)
        if name != usual:
            entry = replace(entry, function={**entry.function, "name": name})
        self._gateway[usual] = name
        self._by_name[name] = entry
        return True

    def reoffer(self, fresh: Catalog) -> None:
        """Offer ``fresh``'s client tools in place of these (a compacted context's: what a
        search loaded before it is held back again), and its gateway tools' entries (the
        tool search's list of what is searchable now) under the names these are offered
        by; a gateway tool ``fresh`` has none of (an MCP server's) stays as it is (a
        deferred server's is held back again apart: :meth:`hold_back`)."""
        renewed = {usual: fresh._by_name[name] for usual, name in fresh._gateway.items()}
        ours = {name: usual for usual, name in self._gateway.items()}
        offered = {n: e for n, e in fresh._by_name.items() if n not in fresh._gateway.values()}
        for name, entry in self._by_name.items():
            if name in ours:
                new = renewed.get(ours[name])
                offered[name] = entry if new is None else _named(new, name)
        self._by_name, self.namespaces = offered, dict(fresh.namespaces)

    def entry(self, name: str) -> Entry | None:
        return self._by_name.get(name)

    def names(self) -> GatewayNames:
        """The names the gateway's tools are offered by, and would be (the tools of earlier
        turns not offered now), beside the tools offered: what their calls in the context
        reach the model as."""
        return GatewayNames(dict(self._gateway), frozenset(self._by_name))

    def model_tools(
        self, *, gateway: bool = True, choice: str | dict[str, Any] = "auto"
    ) -> list[Item]:
        """The functions offered to the model in a round whose model-visible choice is
        ``choice``; ``gateway=False`` leaves the gateway's out (once a response has used up
        its ``max_tool_calls``). After an ``allowed_tools`` choice (:meth:`model_choice`),
        only the tools it names, and the tool search while one of them is deferred (the
        only way to reach it); in a round forcing a tool of an MCP server, only its."""
        allowed = None if self._allowed is None else Allowed(self._allowed, self._by_name.values())
        server = self._forced_server if choice == "required" and gateway else None
        return [
            e.function
            for e in self._by_name.values()
            if not e.deferred
            and (gateway or not e.gateway_owned)
            and (allowed is None or allowed.offers(e))
            and (server is None or (e.kind == "mcp" and e.server_label == server))
        ]

    def model_choice(self, choice: str | dict[str, Any]) -> str | dict[str, Any]:
        """A ``tool_choice`` in model-visible names: a named function, custom, MCP or web
        search tool becomes ``{"type": "function", "name": <model-visible>}``; an MCP
        choice without a name, ``required`` (its server's tools the only ones offered
        while it is: :meth:`model_tools`; its one tool, by name). A name not offered
        falls back to ``auto``.
        ``allowed_tools`` becomes its ``mode``, and narrows what :meth:`model_tools` offers
        to the tools it names from then on (every round of the response)."""
        self._forced_server = None
        if isinstance(choice, str):
            return choice
        kind = choice.get("type")
        if kind == "allowed_tools":
            listed = choice.get("tools")
            self._allowed = (
                [t for t in listed if isinstance(t, dict)] if isinstance(listed, list) else []
            )
            return str(choice.get("mode", "auto"))
        name = choice.get("name")
        if kind in WEB_SEARCH_TYPES or kind == TOOL_SEARCH:
            wanted_kind = TOOL_SEARCH if kind == TOOL_SEARCH else "web_search"
            wanted = [e for e in self._by_name.values() if e.kind == wanted_kind]
        elif kind in client_hosted.TOOL_TYPES:
            wanted = [e for e in self._by_name.values() if e.kind == kind]
        elif kind == "mcp":
            label = choice.get("server_label")
            wanted = [  # a deferred tool is not offered: a choice of one falls back to auto
                e
                for e in self._by_name.values()
                if e.kind == "mcp"
                and e.server_label == label
                and (name is None or e.name == name)
                and not e.deferred
            ]
            if name is None and len(wanted) > 1:
                self._forced_server = label
                return "required"
        else:
            flat = model_name(name or "", choice.get("namespace"))
            found = self._by_name.get(flat)
            wanted = [found] if found is not None and not found.deferred else []
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
        member's name and its ``namespace``; a deferred function's of no namespace (loaded by
        a tool search) the ``namespace`` of its own name, as hosted gives it (the OpenAI
        Agents SDK finds such a function by that shape only). Unknown names stay as the
        model gave them."""
        if "namespace" in item:
            return item  # restored already
        found = self._by_name.get(item.get("name", ""))
        if found is not None and found.namespace is not None:
            item["name"] = found.tool["name"]
            item["namespace"] = found.namespace
        elif found is not None and found.searched:
            item["namespace"] = found.tool["name"]
        return item


def _named(entry: Entry, name: str) -> Entry:
    """``entry`` with its function offered by ``name``."""
    return replace(entry, function={**entry.function, "name": name})


def members(tools: list[Item]) -> Iterator[tuple[Item, str | None]]:
    """Each declared tool with no namespace, and each namespace's members with its name."""
    for tool in tools:
        if tool.get("type") == NAMESPACE:
            for member in tool.get("tools", ()):
                yield member, tool["name"]
        else:
            yield tool, None


def _namespace_of(tools: list[Item], name: str) -> Item:
    """The declaration of a namespace ``tools`` has (as :func:`_members` found it)."""
    return next(t for t in tools if t.get("type") == NAMESPACE and t.get("name") == name)


def _function(tool: Item, namespace: str | None) -> Item:
    if tool.get("type") in client_hosted.TOOL_TYPES:
        return client_hosted.function(tool)
    name = model_name(tool["name"], namespace)
    if tool.get("type") == CUSTOM:
        return custom_tools.function(tool, name)
    function: Item = {"type": "function", "name": name}
    for key in ("description", "parameters", "strict", "cache_control"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return function
