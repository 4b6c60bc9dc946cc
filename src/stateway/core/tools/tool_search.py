"""Tool search: the ``tool_search`` function the model is offered, its items, and the
gateway's own search over a request's deferred tools.

A request that declares ``{"type": "tool_search"}`` may mark functions (or namespaces, or a
namespace's members) ``defer_loading: true``; the catalog holds those back until a search
loads them. The model sees one function, ``tool_search`` (``gateway_tool_search`` beside a
client's function of that name: :meth:`.catalog.Catalog.add`), whose description names what is
searchable (as hosted, a deferred tool's name and description stay visible; its parameters
do not).

- ``execution: "client"``: the client searches. The call goes back as a
  ``tool_search_call`` item (``arguments`` as a JSON value) and the turn ends; the client
  answers with a ``tool_search_output`` input item carrying the tools to load.
- ``execution: "server"`` (the default): the gateway searches the deferred tools for the
  ``query`` (:func:`search`), emits the ``tool_search_call`` and a ``tool_search_output``
  with the loaded tools, and the model continues with them offered.

Either way the output stays in the context, so what it loaded is offered on later turns.
"""

from __future__ import annotations

import re
from typing import Any, Final

import orjson

from stateway.core.ids import new_id
from stateway.core.items import TOOL_SEARCH_CALL, TOOL_SEARCH_OUTPUT, Item
from stateway.core.tools import search_syntax
from stateway.core.tools.catalog import Entry
from stateway.core.tools.model_names import TOOL_SEARCH_FUNCTION
from stateway.core.tools.ports import ToolError, ToolFailure
from stateway.core.tools.tool_types import NAMESPACE, search_execution

PARAMETERS: Final[Item] = {
    "type": "object",
    "properties": {
        "query": {
            "type": "string",
            "description": "Words describing the tools needed (names, actions, topics).",
        },
        "limit": {
            "type": "integer",
            "description": "At most this many tools are loaded (default and maximum 10).",
        },
    },
    "required": ["query"],
    "additionalProperties": False,
}
"""The parameters of the ``tool_search`` function, unless a client search declares its own."""
DESCRIPTION: Final = (
    "Search for more tools and load them. Tools found become callable in the next step."
)
_QUERIES: Final = {
    "regex": (
        "A Python regular expression (re.search syntax, at most 200 characters) matched "
        "against tool names, descriptions and argument names and descriptions; for "
        "example 'weather', 'get_.*_data' or '(?i)slack'."
    ),
    "bm25": "Natural language describing the tools needed (what they do, their names).",
}
"""The ``query`` of a search of another syntax (:mod:`.search_syntax`), described."""
MAX_LOADED: Final = 10
"""At most this many functions are loaded by one gateway search."""
MAX_QUERY_WORDS: Final = 32
"""The distinct words of a query a gateway search reads (a model may write thousands)."""
MAX_LISTED: Final = 64
"""At most this many searchable tools are named in the function's description."""
_WORD = re.compile(r"[a-z0-9]+")
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")


def entry(declared: Item, deferred: list[Entry], namespaces: dict[str, Item]) -> Entry:
    """The ``tool_search`` function: a client search's own description and parameters (or
    defaults), followed by the list of what is searchable."""
    client = search_execution(declared) == "client"
    description = (declared.get("description") if client else None) or DESCRIPTION
    listing = _listing(deferred, namespaces)
    if listing:
        description += "\n\nSearchable tools:\n" + listing
    parameters = declared.get("parameters") if client else None
    syntax = search_syntax.syntax_of(declared)
    if syntax is not None:
        parameters = _query_only(_QUERIES[syntax])
    function: Item = {
        "type": "function",
        "name": TOOL_SEARCH_FUNCTION,
        "description": description,
        "parameters": parameters if isinstance(parameters, dict) else PARAMETERS,
        "strict": False,
    }
    return Entry(kind="tool_search", function=function, tool=declared)


def _query_only(described: str) -> Item:
    """The parameters of a search of another syntax: its ``query`` alone (no ``limit``)."""
    query = {"type": "string", "description": described}
    return {
        "type": "object",
        "properties": {"query": query},
        "required": ["query"],
        "additionalProperties": False,
    }


def call_item(call_id: str | None, execution: str) -> Item:
    """A search's call: a client's under the model's ``call_id``; a gateway search's with
    none, as hosted (a client tells the two apart by it: the Vercel AI SDK sends one with a
    ``call_id`` back as a client's)."""
    return {
        "id": new_id("tsc"),
        "type": TOOL_SEARCH_CALL,
        "status": "in_progress",
        "call_id": call_id,
        "execution": execution,
        "arguments": {},
    }


def output_item(tools: list[Item], error: str | None = None, call: Item | None = None) -> Item:
    """The output of a gateway search, right after its call (no ``call_id``, as hosted:
    the search it answers is the one before it): the loaded tools, as declared; a failed
    search (``incomplete``) loads none and says why in ``error`` (a string, as a failed
    ``mcp_list_tools`` has it). Its id is its ``call``'s, ``tso_`` for ``tsc_`` (a
    frontend that shows the two as a call and its result pairs them by it)."""
    item: Item = {
        "id": output_id(call) if call is not None else new_id("tso"),
        "type": TOOL_SEARCH_OUTPUT,
        "status": "completed" if error is None else "incomplete",
        "call_id": None,
        "execution": "server",
        "tools": tools,
    }
    if error is not None:
        item["error"] = error
    return item


def error_of(error: ToolError | None) -> str | None:
    """A failed search's ``error``: its message, after its cause where it has one (a
    search of another syntax: :mod:`.search_syntax`), as a failed web search's
    (:func:`.web_search.fail`): the item has no other field for it."""
    if error is None:
        return None
    return f"{error.cause}: {error.message}" if error.cause else error.message


def output_id(call: Item) -> str:
    """The id of the output of the gateway search ``call``."""
    return "tso_" + str(call.get("id", "")).removeprefix("tsc_")


def arguments_of(text: str) -> Any:
    """A call's ``arguments`` as the item holds them: the JSON value the model wrote (its
    raw text when it is not JSON)."""
    if not text.strip():
        return {}
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def query_of(arguments: Any) -> str:
    """The words to search for: the ``query`` argument (or, from a model that ignored the
    schema, a plain string)."""
    if isinstance(arguments, dict):
        arguments = arguments.get("query")
    if not isinstance(arguments, str) or not arguments.strip():
        raise ToolFailure("A tool search needs a non-empty 'query'.")
    return arguments.strip()


def limit_of(arguments: Any) -> int:
    """The ``limit`` argument, within 1 and :data:`MAX_LOADED` (which it defaults to)."""
    value = arguments.get("limit") if isinstance(arguments, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return MAX_LOADED
    return max(1, min(MAX_LOADED, int(value)))


def search(
    query: str, deferred: list[Entry], namespaces: dict[str, Item], limit: int = MAX_LOADED
) -> list[Item]:
    """The deferred tools that best match ``query``, as public tools (namespace members
    grouped under their namespace): deterministic, by the query's words found in each
    tool's name (3 points) or description, its namespace's included (1 point); ties keep
    declaration order; at most ``limit``. The query's first :data:`MAX_QUERY_WORDS`
    distinct words count (each is compared with each tool's, on the event loop)."""
    terms = list(dict.fromkeys(_words(query)))[:MAX_QUERY_WORDS]
    scored = []
    for order, candidate in enumerate(deferred):
        named, described = _searched_words(candidate, namespaces)
        score = sum(3 if _found(t, named) else 1 if _found(t, described) else 0 for t in terms)
        if score:
            scored.append((-score, order, candidate))
    best = sorted(sorted(scored, key=lambda s: s[:2])[:limit], key=lambda s: s[1])
    return _public([candidate for _, _, candidate in best], namespaces)


async def search_as_declared(
    declared: Item, arguments: Any, deferred: list[Entry], namespaces: dict[str, Item]
) -> list[Item]:
    """A gateway search of the ``declared`` tool's syntax: its own words search
    (:func:`search`), or another (:mod:`.search_syntax`), whose tools come best first."""
    query = query_of(arguments)
    syntax = search_syntax.syntax_of(declared)
    if syntax is None:
        return search(query, deferred, namespaces, limit_of(arguments))
    return _public(await search_syntax.search(syntax, query, deferred, namespaces), namespaces)


def _searched_words(candidate: Entry, namespaces: dict[str, Item]) -> tuple[list[str], list[str]]:
    """The words of a tool's name (its namespace's, or its MCP server's label, included)
    and of its description (its namespace's too; an MCP tool's tells its server's)."""
    if candidate.kind == "mcp":
        named = _words(candidate.name, candidate.server_label)
        return named, _words(candidate.function.get("description"))
    group = namespaces.get(candidate.namespace or "") or {}
    named = _words(candidate.tool.get("name"), candidate.namespace)
    return named, _words(candidate.tool.get("description"), group.get("description"))


def _public(found: list[Entry], namespaces: dict[str, Item]) -> list[Item]:
    """The tools ``found`` as a search's output lists them: as declared, a namespace's
    members under their namespace, an MCP server's under its ``mcp`` entry (its
    ``server_label`` and the tools loaded as ``allowed_tools``)."""
    out: list[Item] = []
    groups: dict[str, Item] = {}
    servers: dict[str, Item] = {}
    for candidate in found:
        if candidate.kind == "mcp":
            label = str(candidate.server_label)
            server = servers.get(label)
            if server is None:
                server = {"type": "mcp", "server_label": label, "allowed_tools": []}
                servers[label] = server
                out.append(server)
            server["allowed_tools"].append(candidate.name)
            continue
        if candidate.namespace is None:
            out.append(candidate.tool)
            continue
        group = groups.get(candidate.namespace)
        if group is None:
            declared = namespaces.get(candidate.namespace) or {}
            group = {
                "type": NAMESPACE,
                "name": candidate.namespace,
                "description": declared.get("description") or "",
                "tools": [],
            }
            groups[candidate.namespace] = group
            out.append(group)
        group["tools"].append(candidate.tool)
    return out


def _listing(deferred: list[Entry], namespaces: dict[str, Item]) -> str:
    """One line per deferred function, or per namespace with deferred members, or per MCP
    server with deferred tools (as hosted shows a namespace or a server: by its name and
    description)."""
    lines: list[str] = []
    seen: set[str] = set()
    servers: set[str] = set()
    for candidate in deferred:
        if candidate.kind == "mcp":
            label = str(candidate.server_label)
            if label not in servers:
                servers.add(label)
                described = {"description": candidate.tool.get("server_description")}
                lines.append(_line(f"{label} (the tools of an MCP server)", described))
        elif candidate.namespace is not None:
            if candidate.namespace in seen:
                continue
            seen.add(candidate.namespace)
            group = namespaces.get(candidate.namespace) or {}
            lines.append(_line(f"{candidate.namespace} (a group of tools)", group))
        else:
            lines.append(_line(str(candidate.tool.get("name")), candidate.tool))
    if len(lines) > MAX_LISTED:
        lines = [*lines[:MAX_LISTED], f"- ... and {len(lines) - MAX_LISTED} more"]
    return "\n".join(lines)


def _line(name: str, tool: Item) -> str:
    text = str(tool.get("description") or "").strip().split("\n", 1)[0]
    if len(text) > 120:
        text = text[:117] + "..."
    return f"- {name}: {text}" if text else f"- {name}"


def _words(*texts: Any) -> list[str]:
    out: list[str] = []
    for text in texts:
        if isinstance(text, str):
            out += _WORD.findall(_CAMEL.sub(" ", text).lower())
    return out


def _found(term: str, words: list[str]) -> bool:
    """``term`` is one of ``words``, or (four letters or more) a prefix of one or has one
    as its prefix: ``order`` finds ``orders``."""
    for word in words:
        if word == term:
            return True
        short, long = sorted((word, term), key=len)
        if len(short) >= 4 and long.startswith(short):
            return True
    return False
