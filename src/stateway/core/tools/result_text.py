"""A gateway tool's result as the model reads it: the text an MCP call's output or
error, a web search's results or a tool search's loaded tools are given to the model as,
whenever a history is replayed to it (:mod:`stateway.core.tools.history`)."""

from __future__ import annotations

import orjson

from stateway.core.items import Item
from stateway.core.tools.model_names import GatewayNames, model_name
from stateway.core.tools.search_output import loaded, loaded_mcp
from stateway.core.tools.tool_types import NAMESPACE


def mcp_output(item: Item) -> str:
    """What the model was given for an ``mcp_call``: its output, or its error."""
    if item.get("error"):
        return f"Error: {error_text(item['error'])}"
    output = item.get("output")
    if isinstance(output, str):
        return output
    return "The call did not complete." if item.get("status") == "incomplete" else ""


def error_text(error: object) -> str:
    """A failed ``mcp_call``'s ``error`` as the model reads it: a protocol or HTTP error's
    ``message``; a tool execution error's ``content`` as text; a plain string (the form
    stored before errors were objects) as it is; anything else as compact JSON."""
    if isinstance(error, str):
        return error
    if isinstance(error, dict):
        if error.get("type") == "mcp_tool_execution_error":
            return content_text(error.get("content")) or "the tool reported an error"
        message = error.get("message")
        if isinstance(message, str) and message:
            return message
    return _json(error)


def content_text(content: object) -> str:
    """MCP content as the model reads a tool's result: text blocks' text and any other
    block as compact JSON, one per line (a value that is not a list of blocks: its text or
    JSON)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        return _json(content)
    return "\n".join(
        block["text"]
        if isinstance(block, dict)
        and block.get("type") == "text"
        and isinstance(block.get("text"), str)
        else _json(block)
        for block in content
    )


def _json(value: object) -> str:
    return orjson.dumps(value).decode()


RESULTS_NOT_KEPT = (
    "The results of this search were not kept in the conversation; search again if they are needed."
)
"""What the model is told of an earlier search sent back without its ``action.sources``."""

PAGE_NOT_KEPT = "Its content was not kept in the conversation; search again if it is needed."
"""What the model is told of a hosted ``open_page`` action sent back (it has no content)."""
FOUND_NOT_KEPT = "What was found was not kept in the conversation; search again if it is needed."
"""What the model is told of a hosted ``find_in_page`` action sent back."""
OPEN_PAGE = "open_page"
FIND_IN_PAGE = frozenset({"find_in_page", "find"})
"""A hosted search's look into a page: ``find_in_page``, called ``find`` in its first
version (an older client's history has it)."""
PAGE_ACTIONS = FIND_IN_PAGE | {OPEN_PAGE}
"""The hosted search's actions on a page (its ``web_search_call.action.type``), which the
gateway's search never takes: they only come back in a client's history."""


def page_action_output(action: Item) -> str:
    """What the model is told of a hosted ``open_page`` or ``find_in_page`` action: the
    page, and the pattern looked for; what it read there is not in the item."""
    url = action.get("url")
    page = f"the page {url}" if isinstance(url, str) and url else "a page"
    if action.get("type") in FIND_IN_PAGE:
        pattern = action.get("pattern")
        looked = f"'{pattern}'" if isinstance(pattern, str) and pattern else "A pattern"
        return f"{looked} was looked for in {page}. {FOUND_NOT_KEPT}"
    return f"{page[0].upper()}{page[1:]} was opened. {PAGE_NOT_KEPT}"


DATA_SOURCE = "a data source, not a web page"
"""What a hosted search's source without a URL is (``{"type": "api", "name":
"oai-weather"}``: its answer came from OpenAI's own data)."""


def web_search_output(sources: list[Item]) -> str:
    """The results of a search as the model is given them: numbered, title, URL, snippet
    (a hosted search's data source by its name)."""
    if not sources:
        return "No results."
    lines = []
    for number, source in enumerate(sources, 1):
        url = source.get("url")
        if not isinstance(url, str) or not url:  # a hosted search's own data ("api")
            name = source.get("name")
            named = f"{name} ({DATA_SOURCE})" if isinstance(name, str) and name else DATA_SOURCE
            lines += [f"[{number}] {named}", ""]
            continue
        lines.append(f"[{number}] {source.get('title') or url}")
        lines.append(f"URL: {url}")
        if source.get("snippet"):
            lines.append(str(source["snippet"]))
        lines.append("")
    return "\n".join(lines).rstrip()


def tool_search_output(item: Item, names: GatewayNames | None = None) -> str:
    """What the model was given for a ``tool_search_output``: the names it may now call (an
    MCP server's tools by those ``names`` offers them by: apart beside a client's tool of
    their usual name)."""
    if item.get("status") == "incomplete":
        error = item.get("error")
        reason = f": {error}" if isinstance(error, str) and error else "."
        return f"The tool search did not complete{reason}"
    gateway = names or GatewayNames()
    told: list[str] = []
    for tool in loaded(item.get("tools") or ()):
        if tool.get("type") == NAMESPACE:
            told += [model_name(str(m.get("name")), tool.get("name")) for m in tool["tools"]]
        else:
            told.append(str(tool.get("name")))
    for label, loaded_names in loaded_mcp(item.get("tools") or ()).items():
        if loaded_names is None:
            told.append(f"the tools of the MCP server '{label}'")
        else:
            told += [gateway.of(model_name(name, label)) for name in loaded_names]
    if not told:
        return "No tools matched the search."
    return f"Loaded tools: {', '.join(told)}. They can be called now."
