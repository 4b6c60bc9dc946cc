"""The tools a context's items offer beside those a request declares.

An ``additional_tools`` input item (role ``developer``) offers its tools from its turn on:
the decoder adds a request's own to its declared tools, :func:`with_context_tools` those
of earlier turns, each name once (a tool declared again keeps its declaration). A
``tool_search_output`` item's tools were loaded by a search (an earlier one, or the
client's answer to its own): offered from then on, ``defer_loading`` dropped
(:func:`~.search_output.loaded`), while the context holds it: a compaction's model view leaves
it out (:mod:`stateway.core.compaction.view`), so after one what it loaded is offered no
more, on later turns as in the rounds after it (:meth:`~.session.ToolSession.compacted`).
A route's feature stages are shown what the context adds
beside the declared tools (:func:`context_added`), and what they withhold is named by
:func:`visible_names`.
"""

from __future__ import annotations

from stateway.core.items import TOOL_SEARCH_OUTPUT, Item
from stateway.core.tools import client_hosted
from stateway.core.tools.catalog import Catalog, members
from stateway.core.tools.model_names import model_name
from stateway.core.tools.search_output import loaded
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS, CLIENT_TYPES, OFFERED


def with_context_tools(tools: list[Item], context: list[Item]) -> list[Item]:
    """The declared tools plus those of ``additional_tools`` items in the context (earlier
    turns of a ``previous_response_id`` chain) whose names are not declared already."""
    names = {_visible(tool, ns) for tool, ns in members(tools)}
    out = list(tools)
    for item in context:
        if item.get("type") != ADDITIONAL_TOOLS:
            continue
        for tool in item.get("tools") or ():
            if not isinstance(tool, dict) or tool.get("type") not in OFFERED:
                continue  # e.g. a web_search hint: never offered
            own = {model_name(member["name"], ns) for member, ns in members([tool])}
            if not own & names:
                names |= own
                out.append(tool)
    for item in context:  # loaded by a tool search: offered from then on
        if item.get("type") == TOOL_SEARCH_OUTPUT:
            out.extend(loaded(item.get("tools") or ()))
    return out


def context_added(declared: list[Item], context: list[Item]) -> list[Item]:
    """The tools :func:`with_context_tools` adds to the client's among ``declared`` for
    ``context``, but for those a declared tool already offers by each of their names (a
    search's output of a declared deferred tool): what the feature stages are shown
    beside the declared tools (:func:`stateway.core.stages.chain.before_planning`)."""
    client = [tool for tool in declared if tool.get("type") in CLIENT_TYPES]
    names = visible_names(client)
    added = with_context_tools(client, context)[len(client) :]
    return [tool for tool in added if not visible_names([tool]) <= names]


def visible_names(tools: list[Item]) -> frozenset[str]:
    """The model-visible names of the client's tools among ``tools`` (each member of a
    namespace), as a catalog of them offers them all."""
    client = [tool for tool in tools if tool.get("type") in CLIENT_TYPES]
    return frozenset(function["name"] for function in Catalog(client).model_tools())


def _visible(tool: Item, namespace: str | None) -> str:
    if tool.get("type") in client_hosted.TOOL_TYPES:
        return str(tool["type"])
    return model_name(tool["name"], namespace)
