"""The model's view of a context: every item as the function calls and outputs it saw.

Clients store and resend the public items (custom calls, namespace members, MCP and web
search items); an upstream model only ever saw function calls under their model-visible
names and their outputs. :func:`model_items` rewrites the one into the other, so a later
turn replays exactly the history the model saw (a gateway tool's calls, MCP, web search
and tool search, under the name the request offers the tool by:
:class:`~.model_names.GatewayNames`, its usual one unless another tool has it):

- ``custom_tool_call`` / ``custom_tool_call_output``: a function call with one ``input``
  argument, and its output; a namespace member's call gets its flat name (so does a
  ``function_call``'s). A call in the namespace of its own name is a deferred function's
  of no namespace, as hosted gives it (:meth:`.catalog.Catalog.public_call`): it keeps its
  name, unless a namespace of that name has such a member.
- ``mcp_call``: the call (its id is the call id) and its output, or ``Error: `` and its
  error as text (:func:`.result_text.error_text`: the message of a protocol or HTTP
  error, the text of a tool's error content; the plain string responses stored before
  errors were objects carry). One that ran after an approval answers the
  ``mcp_approval_request``, which is the call.
- ``mcp_approval_request``: the call, once answered: by the ``mcp_call`` it led to, or by
  a denying ``mcp_approval_response`` (the model is told it was declined, and the
  ``reason`` the client gave, if any). The answer
  comes where the client gave it, the approving or denying response (or the
  ``mcp_call``, when the response is not in the history). An unanswered request is left
  out: a model must never see a call without its output.
- ``web_search_call``: a call of the gateway's web search with its query (a hosted
  search's ``queries``, joined, when it has no ``query``), and the results
  it was given
  (rendered from the item's ``action.sources``; a call sent back without them, as Codex
  sends its searches back, tells the model its results were not kept, not that there
  were none). A hosted ``open_page`` or ``find_in_page`` action (sent back from hosted
  output) is a call of its ``url`` (and ``pattern``), and the model is told the page was
  opened (the pattern looked for in it) and what it read was not kept.
- ``tool_search_call`` / ``tool_search_output`` (either ``execution``): a ``tool_search``
  call with the search's arguments, and an output naming the tools it loaded (which are
  offered from then on; an MCP server's by the names they are offered by). A search
  without its output is left out.
- ``mcp_list_tools``, ``mcp_approval_response``, ``additional_tools``: left out (their
  tools are among the request's; answers are folded into their calls).
- an assistant message's output tokens (``logprobs``): left out; they were the model's
  output, not its input.
- ``compaction``, ``compaction_trigger``: left out (the gateway has already shown the
  model a compaction's summary in its place: :mod:`stateway.core.compaction.view`).
- ``configuration_update``: left out (its settings are the response's:
  :mod:`stateway.core.configuration_updates`).
- ``shell_call`` / ``local_shell_call`` / ``apply_patch_call`` and their outputs: a
  ``shell`` / ``local_shell`` / ``apply_patch`` function call whose arguments are the
  action or operation, and its output as text (:mod:`stateway.core.tools.client_hosted`);
  left as they are for an upstream that speaks them natively (``native``).

Rounds: nothing in the items says where one round of the model's ends and the next
begins; outputs do. Calls whose outputs all come after them are one turn of the model's
(one assistant message's Chat ``tool_calls``, its Anthropic ``tool_use`` blocks), and a
call after an output is a later turn (:mod:`.call_order` orders each run of outputs as
their calls). A gateway call carries its output, shown right after the call as the
gateway's next round was sent it: a call after it was made in a later round, with its
result in hand. The gateway's tool search writes its output after the round's calls, and
a client answers its calls and approval requests in its next request, so calls made
with those stay one turn. A round of several gateway calls, or a mixed round whose
gateway call came before a client call, cannot be told from rounds of one call each: it
reads as those, which never shows the model a call as made before a result it may have
been made from.
"""

from __future__ import annotations

from typing import Final

import orjson

from stateway.core.configuration_updates import CONFIGURATION_UPDATE
from stateway.core.items import (
    CUSTOM_TOOL_CALL,
    CUSTOM_TOOL_CALL_OUTPUT,
    FUNCTION_CALL,
    FUNCTION_CALL_OUTPUT,
    MCP_APPROVAL_REQUEST,
    MCP_APPROVAL_RESPONSE,
    MCP_CALL,
    MCP_LIST_TOOLS,
    MESSAGE,
    TOOL_SEARCH_CALL,
    TOOL_SEARCH_OUTPUT,
    WEB_SEARCH_CALL,
    Item,
)
from stateway.core.logprobs import without_tokens
from stateway.core.tools import client_hosted
from stateway.core.tools.call_order import in_call_order
from stateway.core.tools.model_names import (
    TOOL_SEARCH_FUNCTION,
    WEB_SEARCH_FUNCTION,
    GatewayNames,
    model_name,
)
from stateway.core.tools.result_text import (
    PAGE_ACTIONS,
    RESULTS_NOT_KEPT,
    mcp_output,
    page_action_output,
    tool_search_output,
    web_search_output,
)
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS

REWRITTEN_ITEM_TYPES: Final = frozenset(
    {
        CUSTOM_TOOL_CALL,
        CUSTOM_TOOL_CALL_OUTPUT,
        ADDITIONAL_TOOLS,
        MCP_LIST_TOOLS,
        MCP_CALL,
        MCP_APPROVAL_REQUEST,
        MCP_APPROVAL_RESPONSE,
        WEB_SEARCH_CALL,
        TOOL_SEARCH_CALL,
        TOOL_SEARCH_OUTPUT,
    }
    | client_hosted.ITEM_TYPES
)
"""Item types :func:`model_items` turns into function calls and outputs (or leaves out):
any backend that carries function calls carries these too."""
_GATEWAY: Final = frozenset(
    {MCP_LIST_TOOLS, MCP_CALL, MCP_APPROVAL_REQUEST, MCP_APPROVAL_RESPONSE, WEB_SEARCH_CALL}
)
_TOOL_SEARCH: Final = frozenset({TOOL_SEARCH_CALL, TOOL_SEARCH_OUTPUT})
_COMPACTION: Final = frozenset({"compaction", "compaction_trigger", CONFIGURATION_UPDATE})
"""Left out: compaction items, and settings changes (applied to the response's settings)."""
DECLINED: Final = "The user declined to run this tool call."


def denial_text(answer: Item) -> str:
    """What the model is told of a denying ``mcp_approval_response``: that the call was
    declined, and the ``reason`` the client gave for it (what the model needs to go on
    without the call), when it gave one."""
    reason = answer.get("reason")
    if isinstance(reason, str) and reason.strip():
        return f"{DECLINED} Their reason: {reason.strip()}"
    return DECLINED


_REWRITTEN: Final = (
    _COMPACTION | client_hosted.ITEM_TYPES | _TOOL_SEARCH | _GATEWAY | {ADDITIONAL_TOOLS}
)
"""Every item type :func:`model_items` may rewrite or leave out (shell and apply_patch
types even when native: the check only decides whether to look closer)."""

_ANSWERS: Final = frozenset({FUNCTION_CALL_OUTPUT, CUSTOM_TOOL_CALL_OUTPUT})
"""The client's outputs, which :func:`model_items` puts in the order of their calls."""


def model_items(
    items: list[Item], native: frozenset[str] = frozenset(), names: GatewayNames | None = None
) -> list[Item]:
    """A context as the model saw it (see the module docstring); item types in ``native``
    are left as they are; ``names``: those the request offers the gateway's tools by (by
    default, their usual ones). Each round's outputs come in the order of its calls
    (:mod:`stateway.core.tools.call_order`)."""
    kinds = {item.get("type") for item in items}  # one pass decides which rewrites apply
    seen = _model_items(items, native, kinds, names or GatewayNames())
    # outputs to order: the client's (custom tools' among them), or a rewritten item's
    return in_call_order(seen) if kinds & _ANSWERS or kinds & _REWRITTEN else seen


def _model_items(
    items: list[Item], native: frozenset[str], kinds: set[object], names: GatewayNames
) -> list[Item]:
    if not kinds & _REWRITTEN:  # the common case: plain messages and function calls
        return [_client_item(item, names) for item in items]
    if kinds & _COMPACTION:
        items = [item for item in items if item.get("type") not in _COMPACTION]
    hosted = client_hosted.ITEM_TYPES - native
    if kinds & hosted:
        items = [
            client_hosted.model_item(item) if item.get("type") in hosted else item for item in items
        ]
    if kinds & _TOOL_SEARCH:
        items = _tool_search_pairs(items, names)
    if not kinds & _GATEWAY:
        return [_client_item(item, names) for item in items if item.get("type") != ADDITIONAL_TOOLS]
    ran = {i["approval_request_id"]: i for i in items if _approved_call(i)}
    asked = {i.get("id") for i in items if i.get("type") == MCP_APPROVAL_REQUEST}
    declined = {
        i.get("approval_request_id")
        for i in items
        if i.get("type") == MCP_APPROVAL_RESPONSE and i.get("approve") is False
    }
    out: list[Item] = []
    answers = _Answers(out)
    for item in items:
        kind = item.get("type")
        if kind == MCP_CALL:
            approval = item.get("approval_request_id")
            if approval and approval in asked:  # answers its request (if not answered yet)
                answers.give(approval, _output(approval, mcp_output(item)))
            else:  # no request in this history: the call stands alone, its result with it
                call = _mcp_function_call(item, item["id"], names)
                out += (call, _output(item["id"], mcp_output(item)))
        elif kind == MCP_APPROVAL_REQUEST:
            request_id = str(item.get("id"))
            if request_id in ran or request_id in declined:
                out.append(_mcp_function_call(item, request_id, names))
                answers.called(request_id)
        elif kind == MCP_APPROVAL_RESPONSE and item.get("approval_request_id") in asked:
            request_id = item["approval_request_id"]
            if request_id in ran:
                answers.give(request_id, _output(request_id, mcp_output(ran[request_id])))
            elif item.get("approve") is False:
                answers.give(request_id, _output(request_id, denial_text(item)))
        elif kind == WEB_SEARCH_CALL:
            out += _web_search_pair(item, names.of(WEB_SEARCH_FUNCTION))
        elif kind not in _GATEWAY and kind != ADDITIONAL_TOOLS:
            out.append(_client_item(item, names))
    return out


class _Answers:
    """Where an approval request's answer goes: right where the client answered it (its
    ``mcp_approval_response``, or the ``mcp_call`` that ran when that is missing), as a
    client call's output goes where the client sent it. An answer read before its request
    (out of order) follows the call; a request answered twice keeps its first answer."""

    __slots__ = ("_answered", "_early", "_out", "_waiting")

    def __init__(self, out: list[Item]) -> None:
        self._out = out
        self._waiting: set[str] = set()
        self._answered: set[str] = set()
        self._early: dict[str, Item] = {}

    def called(self, request_id: str) -> None:
        """The request's call was just written."""
        early = self._early.pop(request_id, None)
        if early is None:
            self._waiting.add(request_id)
        else:
            self._out.append(early)
            self._answered.add(request_id)

    def give(self, request_id: str, output: Item) -> None:
        if request_id in self._answered:
            return
        if request_id in self._waiting:
            self._waiting.discard(request_id)
            self._answered.add(request_id)
            self._out.append(output)
        else:
            self._early.setdefault(request_id, output)


def _tool_search_pairs(items: list[Item], names: GatewayNames) -> list[Item]:
    """Each answered tool search as a call of the search's function and its output, in
    place, each tool named as ``names`` offers it. An output without a ``call_id`` (a hosted
    search) answers the latest search not answered yet."""
    waiting: list[str] = []
    answers: dict[int, str] = {}  # index of an output -> the key of the search it answers
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == TOOL_SEARCH_CALL:
            waiting.append(_search_key(item))
        elif kind == TOOL_SEARCH_OUTPUT:
            key = item.get("call_id") or (waiting[-1] if waiting else None)
            if key in waiting:
                waiting.remove(key)
                answers[index] = key
    answered = set(answers.values())
    name = names.of(TOOL_SEARCH_FUNCTION)
    out: list[Item] = []
    for index, item in enumerate(items):
        kind = item.get("type")
        if kind == TOOL_SEARCH_CALL:
            key = _search_key(item)
            if key in answered:
                arguments = item.get("arguments")
                if not isinstance(arguments, str):
                    arguments = orjson.dumps(arguments or {}).decode()
                out.append(
                    {
                        "type": FUNCTION_CALL,
                        "call_id": key,
                        "name": name,
                        "arguments": arguments,
                    }
                )
        elif kind == TOOL_SEARCH_OUTPUT:
            if index in answers:
                out.append(_output(answers[index], tool_search_output(item, names)))
        else:
            out.append(item)
    return out


def _search_key(item: Item) -> str:
    return str(item.get("call_id") or item.get("id"))


def _approved_call(item: Item) -> bool:
    return item.get("type") == MCP_CALL and bool(item.get("approval_request_id"))


def _mcp_function_call(item: Item, call_id: str, names: GatewayNames) -> Item:
    return {
        "type": FUNCTION_CALL,
        "call_id": call_id,
        "name": names.of(model_name(item.get("name", ""), item.get("server_label"))),
        "arguments": item.get("arguments") or "{}",
    }


def _output(call_id: str, output: str) -> Item:
    return {"type": FUNCTION_CALL_OUTPUT, "call_id": call_id, "output": output}


def _web_search_pair(item: Item, name: str) -> tuple[Item, Item]:
    raw = item.get("action")
    action: Item = raw if isinstance(raw, dict) else {}
    page = action.get("type") in PAGE_ACTIONS
    arguments = _page_arguments(action) if page else {"query": _query(action)}
    call: Item = {
        "type": FUNCTION_CALL,
        "call_id": item["id"],
        "name": name,
        "arguments": orjson.dumps(arguments).decode(),
    }
    if item.get("status") == "failed":
        error = item.get("error") or "the search failed."
        return call, _output(item["id"], f"Error: {error}")
    if page:
        return call, _output(item["id"], page_action_output(action))
    sources = action.get("sources")
    if not isinstance(sources, list):
        return call, _output(item["id"], RESULTS_NOT_KEPT)
    return call, _output(item["id"], web_search_output(sources))


def _query(action: Item) -> str:
    """What a search looked for: its ``query``, else the ``queries`` a hosted search of
    several gives (as Codex sends it back), joined."""
    query = action.get("query")
    if isinstance(query, str) and query:
        return query
    queries = action.get("queries")
    if not isinstance(queries, list):
        return ""
    return ", ".join(q for q in queries if isinstance(q, str) and q)


def _page_arguments(action: Item) -> Item:
    """A hosted page action's ``url`` (and ``pattern``), as the call's arguments."""
    return {key: action[key] for key in ("url", "pattern") if isinstance(action.get(key), str)}


def _client_item(item: Item, names: GatewayNames) -> Item:
    kind = item.get("type")
    if kind == MESSAGE and item.get("role") == "assistant":  # only answers hold tokens
        return without_tokens(item)
    if kind == CUSTOM_TOOL_CALL:
        call: Item = {
            "type": FUNCTION_CALL,
            "call_id": item["call_id"],
            "name": _call_name(item, names),
            "arguments": orjson.dumps({"input": item["input"]}).decode(),
        }
        return call
    if kind == CUSTOM_TOOL_CALL_OUTPUT:
        return {"type": FUNCTION_CALL_OUTPUT, "call_id": item["call_id"], "output": item["output"]}
    if kind == FUNCTION_CALL and item.get("namespace"):
        flat = {k: v for k, v in item.items() if k != "namespace"}
        flat["name"] = _call_name(item, names)
        return flat
    return item


def _call_name(item: Item, names: GatewayNames) -> str:
    """The name the model called a client's tool by: a namespace member's flat name, or, in
    the namespace of its own name (a deferred function's, as hosted gives it), the name
    itself unless a namespace of that name has a member of it."""
    name, namespace = item["name"], item.get("namespace")
    flat = model_name(name, namespace)
    return name if namespace == name and flat not in names.taken else flat
