"""The gateway's own tools as the Messages API shows server tools: Anthropic's web search
tool and its MCP connector, run by the gateway for any model.

In: the ``web_search_YYYYMMDD`` tool and ``mcp_servers`` (with any ``mcp_toolset`` tools
configuring them) become the gateway's ``web_search`` and ``mcp`` tools (``require_approval:
never``: the connector has no approvals). Out: each call of a tool the client declared is a
pair of blocks, as Anthropic answers —

- a search: ``server_tool_use`` (``srvtoolu_`` id, ``input.query``) and
  ``web_search_tool_result`` (per hit ``url``, ``title``, and the snippet the model was
  given as ``encrypted_content``; ``web_search_tool_result_error`` when it failed); the
  answer's ``url_citation`` annotations of those hits as ``web_search_result_location``
  citations (:class:`SearchResults`);
- an MCP call: ``mcp_tool_use`` (``mcptoolu_`` id, ``name``, ``server_name``, ``input``)
  and ``mcp_tool_result`` (``is_error``, the output as a text block).

The same blocks sent back in a later turn are the calls they show (a hit's sealed text
from Anthropic's own search, which no other model reads, left out). Calls of a backend's
``gateway_tools`` (a server the client did not declare) stay hidden
(:mod:`stateway.core.hidden`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from stateway.core.items import MCP_CALL, WEB_SEARCH_CALL, Item
from stateway.core.nesting import nests_too_deep
from stateway.core.response import ResponseState
from stateway.core.tools import web_search
from stateway.core.tools.mcp_binding import carries_credentials, http_url
from stateway.protocols.messages import tool_search as tool_search_blocks
from stateway.protocols.messages.answered_calls import answered
from stateway.protocols.messages.blocks import (
    McpToolResultBlock,
    McpToolUseBlock,
    ServerToolUseBlock,
    WebSearchResult,
    WebSearchToolResultBlock,
)
from stateway.protocols.messages.errors import field_error
from stateway.protocols.messages.tool_params import McpServerParam, McpToolsetParam

WEB_SEARCH: Final = "web_search"
"""The web search server tool's name, and the type of the gateway tool it becomes."""
SERVER_TOOL_USE_PREFIX: Final = "srvtoolu_"
"""A shown search's id: this, then its ``web_search_call`` item's id without ``ws_``."""
MCP_TOOL_USE_PREFIX: Final = "mcptoolu_"
"""A shown MCP call's id: this, then its ``mcp_call`` item's id without ``mcp_``."""
CITED_TEXT_LIMIT: Final = 150
"""The most of a hit's text a ``web_search_result_location`` quotes, as Anthropic's do."""


# -- in: declarations ------------------------------------------------------------------


def mcp_tools(servers: list[McpServerParam], toolsets: dict[str, McpToolsetParam]) -> list[Item]:
    """``mcp_servers`` as the gateway's ``mcp`` tools; ``toolsets``: the ``mcp_toolset``
    tools by server name (which tools of a server are offered)."""
    declared: list[Item] = []
    names: set[str] = set()
    for index, server in enumerate(servers):
        if server.name in names:
            raise field_error(
                f"mcp_servers.{index}.name",
                f"MCP server names must be unique; '{server.name}' is given twice.",
            )
        names.add(server.name)
        if not http_url(server.url):  # the core's check would name its server_url
            raise field_error(
                f"mcp_servers.{index}.url",
                "expected an http:// or https:// URL with a host (and a port from 0 to "
                "65535), without whitespace.",
            )
        if carries_credentials(server.url):
            raise field_error(
                f"mcp_servers.{index}.url",
                "the URL must not carry credentials (a user or password before '@'); send "
                "the server's token as authorization_token, which is never stored.",
            )
        configuration = server.tool_configuration
        if configuration is not None and configuration.enabled is False:
            continue
        tool: Item = {
            "type": "mcp",
            "server_label": server.name,
            "server_url": server.url,
            "require_approval": "never",
        }
        if server.authorization_token:
            tool["authorization"] = server.authorization_token
        allowed = configuration.allowed_tools if configuration is not None else None
        toolset = toolsets.get(server.name)
        if toolset is not None:
            allowed = _toolset_allowed(toolset, allowed)
            if allowed == []:
                continue
        if allowed is not None:
            tool["allowed_tools"] = allowed
        if toolset is not None and toolset.default_config and toolset.default_config.defer_loading:
            tool["defer_loading"] = True  # its tools wait for a tool search to load them
        declared.append(tool)
    for name in toolsets.keys() - names:
        raise field_error(
            "tools",
            f"an mcp_toolset names the MCP server '{name}', which mcp_servers does not declare.",
        )
    return declared


def _toolset_allowed(toolset: McpToolsetParam, allowed: list[str] | None) -> list[str] | None:
    """The tool names an ``mcp_toolset`` enables (None: all), within ``allowed``."""
    default = toolset.default_config.enabled if toolset.default_config else None
    configs = toolset.configs or {}
    if default is False:
        enabled = [name for name, config in configs.items() if config.enabled]
    else:
        disabled = [name for name, config in configs.items() if config.enabled is False]
        if disabled:
            raise field_error(
                "tools",
                f"the mcp_toolset of '{toolset.mcp_server_name}' disables single tools "
                f"({', '.join(disabled)}); this gateway offers an allow-list only: set "
                "default_config.enabled to false and enable the tools to offer.",
            )
        enabled = None
    if enabled is None:
        return allowed
    return [name for name in enabled if allowed is None or name in allowed]


# -- out: blocks -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Shown:
    """Which of the gateway's calls a response shows: those of tools the client declared."""

    searches: bool = False
    mcp_servers: frozenset[str] = frozenset()
    tool_search: str | None = None
    """The tool search server tool's name, when the client declared it."""

    @classmethod
    def of(cls, state: ResponseState) -> Shown:
        tools = state.settings.tools
        return cls(
            any(tool.get("type") == WEB_SEARCH for tool in tools),
            frozenset(str(t.get("server_label")) for t in tools if t.get("type") == "mcp"),
            tool_search_blocks.shown_name(tools),
        )

    def shows(self, item: Item) -> bool:
        kind = item.get("type")
        if kind == WEB_SEARCH_CALL:
            return self.searches
        if tool_search_blocks.is_search_item(item):
            return self.tool_search is not None
        return kind == MCP_CALL and item.get("server_label") in self.mcp_servers

    def blocks(self, item: Item) -> list[dict[str, Any]]:
        """A shown item's blocks: a call's use and result blocks; a tool search's call,
        or its output, one block each."""
        if self.tool_search is not None and tool_search_blocks.is_search_item(item):
            return [tool_search_blocks.block(item, self.tool_search)]
        return blocks(item)

    def searches_run(self, state: ResponseState) -> int:
        """The searches shown that ran (a refused or failed one is not counted)."""
        if not self.searches:
            return 0
        return sum(
            1
            for item in state.output
            if item.get("type") == WEB_SEARCH_CALL and item.get("status") == "completed"
        )


class SearchResults:
    """The hits of the searches a response shows, by URL: what a ``url_citation``
    annotation of its answer (a URL of a hit the model named) cites, as the
    ``web_search_result_location`` Anthropic would give: the hit's ``url`` and ``title``,
    the start of its text as ``cited_text``, and an ``encrypted_index`` naming the search
    and the hit (opaque to the client; one sent back is taken and not looked into)."""

    __slots__ = ("_cited",)

    def __init__(self, earlier: Iterable[Item] = ()) -> None:
        """``earlier``: the request's input, whose searches since the user last spoke (a
        turn a ``tool_result`` continues after a search beside the client's call) the
        answer cites too, as the response that ran them would have."""
        self._cited: dict[str, dict[str, Any]] = {}
        for item in web_search.turn_searches(earlier):
            self.add(item)

    @classmethod
    def of(
        cls, state: ResponseState, shown: Shown, earlier: Iterable[Item] = ()
    ) -> SearchResults | None:
        """The hits of ``state``'s shown searches and of the turn's ``earlier`` ones; None
        when it shows none."""
        if not shown.searches:
            return None
        results = cls(earlier)
        for item in state.output:
            results.add(item)
        return results

    def add(self, item: Item) -> None:
        """The hits of a shown search (any other item adds nothing); a URL two searches
        found is cited as the first found it."""
        if item.get("type") != WEB_SEARCH_CALL or item.get("status") != "completed":
            return
        search = use_start(item)["id"]
        for position, source in enumerate((item.get("action") or {}).get("sources") or ()):
            url = source.get("url") if isinstance(source, dict) else None
            if not isinstance(url, str) or url in self._cited:
                continue
            index = base64.b64encode(f"{search}:{position}".encode()).decode()
            self._cited[url] = {
                "type": "web_search_result_location",
                "url": url,
                "title": source.get("title") or "",
                "encrypted_index": index,
                "cited_text": str(source.get("snippet") or "")[:CITED_TEXT_LIMIT],
            }

    def citations(self, part: Item) -> list[dict[str, Any]]:
        """A text part's ``url_citation`` annotations of these hits, as citations."""
        cited = []
        for annotation in part.get("annotations") or ():
            if isinstance(annotation, dict) and annotation.get("type") == "url_citation":
                citation = self._cited.get(str(annotation.get("url")))
                if citation is not None:
                    cited.append(dict(citation))
        return cited


def use_start(item: Item) -> dict[str, Any]:
    """A shown call's ``server_tool_use`` or ``mcp_tool_use`` block, ``input`` empty (as a
    stream starts it)."""
    if item.get("type") == WEB_SEARCH_CALL:
        server_id = SERVER_TOOL_USE_PREFIX + str(item.get("id", "")).removeprefix("ws_")
        return {"type": "server_tool_use", "id": server_id, "name": WEB_SEARCH, "input": {}}
    return {
        "type": "mcp_tool_use",
        "id": MCP_TOOL_USE_PREFIX + str(item.get("id", "")).removeprefix("mcp_"),
        "name": item.get("name"),
        "server_name": item.get("server_label"),
        "input": {},
    }


def use_input(item: Item) -> dict[str, Any]:
    if item.get("type") == WEB_SEARCH_CALL:
        return {"query": (item.get("action") or {}).get("query") or ""}
    try:
        parsed = orjson.loads(item.get("arguments") or "{}")
    except orjson.JSONDecodeError:
        parsed = None
    return parsed if isinstance(parsed, dict) and not nests_too_deep(parsed) else {}


def result_block(item: Item) -> dict[str, Any]:
    """A shown call's ``web_search_tool_result`` or ``mcp_tool_result`` block."""
    tool_use_id = use_start(item)["id"]
    if item.get("type") == MCP_CALL:
        failed = item.get("status") != "completed"
        text = _error_text(item.get("error")) if failed else str(item.get("output") or "")
        return {
            "type": "mcp_tool_result",
            "tool_use_id": tool_use_id,
            "is_error": failed,
            "content": [{"type": "text", "text": text}],
        }
    content: Any
    if item.get("status") == "failed":
        code = web_search.error_code(item.get("error"))
        content = {"type": "web_search_tool_result_error", "error_code": code}
    else:
        content = [
            {
                "type": "web_search_result",
                "url": source.get("url"),
                "title": source.get("title") or "",
                "encrypted_content": source.get("snippet") or "",
                "page_age": None,
            }
            for source in (item.get("action") or {}).get("sources") or ()
            if isinstance(source, dict)
        ]
    return {"type": "web_search_tool_result", "tool_use_id": tool_use_id, "content": content}


def blocks(item: Item) -> list[dict[str, Any]]:
    return [{**use_start(item), "input": use_input(item)}, result_block(item)]


def _error_text(error: object) -> str:
    """A failed ``mcp_call``'s error as text: its message, or its content's text."""
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        content = error.get("content")
        if isinstance(content, list):
            return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        return str(error.get("message") or "")
    return "The call failed."


# -- in: an earlier turn's blocks ------------------------------------------------------


def call_of(
    block: ServerToolUseBlock | McpToolUseBlock, where: str, pending: dict[str, Item]
) -> Item:
    """The item an earlier turn's ``server_tool_use`` (a web search) or ``mcp_tool_use``
    showed; its result block, which follows, completes it."""
    if isinstance(block, McpToolUseBlock):
        item: Item = {
            "id": "mcp_" + block.id.removeprefix(MCP_TOOL_USE_PREFIX),
            "type": MCP_CALL,
            "status": "completed",
            "server_label": block.server_name,
            "name": block.name,
            "arguments": orjson.dumps(block.input).decode(),
            "output": None,
            "error": None,
            "approval_request_id": None,
        }
    elif block.name == WEB_SEARCH:
        query = block.input.get("query")
        item = {
            "id": "ws_" + block.id.removeprefix(SERVER_TOOL_USE_PREFIX),
            "type": WEB_SEARCH_CALL,
            "status": "completed",
            "action": {"type": "search", "query": query if isinstance(query, str) else ""},
        }
    else:
        raise field_error(
            f"{where}.name",
            f"server tool {block.name!r} is not supported; only web_search is.",
        )
    pending[block.id] = item
    return item


def complete(
    block: WebSearchToolResultBlock | McpToolResultBlock, where: str, pending: dict[str, Item]
) -> None:
    """Fill in the call a result block answers (it must follow the call's block)."""
    wanted = MCP_CALL if isinstance(block, McpToolResultBlock) else WEB_SEARCH_CALL
    item = answered(pending, block.tool_use_id, wanted, where, block_type=block.type)
    if isinstance(block, McpToolResultBlock):
        content = block.content
        text = content if isinstance(content, str) else "".join(b.text for b in content)
        if block.is_error:
            item["status"], item["error"] = "failed", text
        else:
            item["output"] = text
    elif isinstance(block.content, list):
        item["action"]["sources"] = [
            {"type": "url", "url": hit.url, "title": hit.title, "snippet": _snippet(hit)}
            for hit in block.content
        ]
    else:
        item["status"], item["error"] = "failed", block.content.error_code


_SEALED: Final = re.compile(r"[A-Za-z0-9+/_-]{64,}={0,2}")
"""What Anthropic's own search puts in a hit's ``encrypted_content``: one long base64
token, which only its models unseal (the gateway's is the provider's snippet, in words)."""


def _snippet(hit: WebSearchResult) -> str:
    """A hit's text as the model is given it again: the gateway's snippet, or nothing for
    a hit of Anthropic's own search (a conversation begun there), whose sealed text no
    other model can read (it keeps its title and URL)."""
    text = hit.encrypted_content
    return "" if _SEALED.fullmatch(text) else text
