"""Declared tools of the Responses wire, checked and normalized.

Client-owned kinds: ``function``, ``custom`` (freeform input, optionally with a ``text``
or ``grammar`` format), ``namespace`` (a group of function and custom tools), ``shell``,
``local_shell`` and ``apply_patch``; functions, custom tools and namespaces may be marked
``defer_loading``. ``tool_search`` is the client's or the gateway's by its ``execution``;
the tools of a ``tool_search_output`` input item are checked like declared ones (but not
declared: they are loaded when the item is in the context) by :func:`check_loaded`,
which the items decoder calls for every such item (a response's input, a conversation's
items). Gateway-owned kinds: ``mcp`` and ``web_search`` (any of its types:
``web_search_preview``, the dated ones); their shapes are checked here, and whether the
gateway can run them (a configured server or provider) in the core
(:mod:`stateway.core.tools.toolset`). Other kinds (``image_generation``,
``code_interpreter``, a future type) are kept as sent, once their nesting is checked:
whether the chosen upstream can carry them is decided in the core, after routing.
"""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.core.tools import client_hosted
from stateway.core.tools.model_names import model_name
from stateway.core.tools.tool_types import (
    ADDITIONAL_TOOLS,
    CUSTOM,
    NAMESPACE,
    TOOL_SEARCH,
    WEB_SEARCH_TYPES,
)
from stateway.protocols.responses.nesting import check_nesting
from stateway.protocols.responses.tools.client import (
    claim_name,
    decode_custom,
    decode_function,
    decode_namespace,
    decode_tool_search,
)
from stateway.protocols.responses.tools.fields import invalid_type
from stateway.protocols.responses.tools.gateway import decode_mcp, decode_web_search


def decode_tools(tools: list[dict[str, Any]], raw_input: object = None) -> list[Item]:
    """The top-level ``tools``, then those of each ``additional_tools`` input item (added
    as if declared at the top level); model-visible names are unique across all."""
    decoded: list[Item] = []
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        _decode(tool, f"tools[{index}]", seen, decoded)
    if isinstance(raw_input, list):
        for item_index, item in enumerate(raw_input):
            if not isinstance(item, dict) or item.get("type") != ADDITIONAL_TOOLS:
                continue
            extra = item.get("tools")
            if isinstance(extra, list):  # a bad item is the items decoder's 400
                for index, tool in enumerate(extra):
                    _decode(tool, f"input[{item_index}].tools[{index}]", seen, decoded)
    return decoded


def check_loaded(tools: list[Any], path: str) -> None:
    """The tools of a ``tool_search_output`` item at ``path`` (checked by the items decoder,
    wherever input items come from) must be valid tools; the item itself is kept as sent."""
    seen: set[str] = set()
    for index, tool in enumerate(tools):
        _decode(tool, f"{path}.tools[{index}]", seen, [])


def _decode(tool: Any, path: str, seen: set[str], decoded: list[Item]) -> None:
    if not isinstance(tool, dict):
        raise invalid_type("Each tool must be an object.", path)
    kind = tool.get("type")
    if not isinstance(kind, str) or not kind:  # checked first: a list or an object is no key
        raise InvalidRequest(
            "Every tool needs a string 'type'.",
            param=f"{path}.type",
            code="missing_required_parameter" if kind is None else "invalid_type",
        )
    if kind in WEB_SEARCH_TYPES:
        decoded.append(decode_web_search(tool, path))
    elif kind == "mcp":
        decoded.append(decode_mcp(tool, path))
    elif kind == "function":
        function = decode_function(tool, path)
        claim_name(seen, model_name(function["name"]), f"{path}.name")
        decoded.append(function)
    elif kind == CUSTOM:
        custom = decode_custom(tool, path)
        claim_name(seen, model_name(custom["name"]), f"{path}.name")
        decoded.append(custom)
    elif kind == NAMESPACE:
        decoded.append(decode_namespace(tool, path, seen))
    elif kind == TOOL_SEARCH:
        search = decode_tool_search(tool, path)
        if any(t.get("type") == TOOL_SEARCH for t in decoded):
            return  # declared again (say, in an additional_tools item): the first counts
        decoded.append(search)  # no function: one of its name is the client's own
    elif kind in client_hosted.TOOL_TYPES:
        claim_name(seen, kind, f"{path}.type")  # offered as the function of that name
        decoded.append(_passed_through(tool, path))
    else:
        decoded.append(_passed_through(tool, path))


def _passed_through(tool: dict[str, Any], path: str) -> Item:
    """A tool kept as sent (a ``shell`` tool's ``environment`` among its fields)."""
    for key, value in tool.items():
        check_nesting(value, f"{path}.{key}")
    return dict(tool)
