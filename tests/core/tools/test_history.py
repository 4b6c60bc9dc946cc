"""The model's view of gateway items: pairs, approvals, ordering of a mixed round."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.tools.catalog import Catalog
from stateway.core.tools.history import DECLINED, model_items
from stateway.core.tools.model_names import GatewayNames
from stateway.core.tools.result_text import (
    FOUND_NOT_KEPT,
    PAGE_NOT_KEPT,
    RESULTS_NOT_KEPT,
    error_text,
)


def mcp_call(item_id: str, output: str | None = "ok", **extra: Any) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "mcp_call",
        "server_label": "s",
        "name": "t",
        "arguments": "{}",
        "output": output,
        "error": None,
        **extra,
    }


def names_beside(name: str) -> GatewayNames:
    """The names of a request's gateway tools beside a client's function called ``name``."""
    return Catalog([{"type": "function", "name": name}]).names()


def shape(items: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(i["type"], i.get("call_id", "")) for i in items]


def test_sequential_gateway_calls_are_each_followed_by_their_result() -> None:
    seen = model_items([mcp_call("a"), mcp_call("b")])
    assert shape(seen) == [
        ("function_call", "a"),
        ("function_call_output", "a"),
        ("function_call", "b"),
        ("function_call_output", "b"),
    ]
    assert seen[0]["name"] == "s__t"


CLIENT_CALL = {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}
CLIENT_ANSWER = {"type": "function_call_output", "call_id": "c", "output": "x"}
REQUEST = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}


def test_a_client_call_after_a_gateway_call_comes_after_its_result() -> None:
    """The next round's call (nothing marks a round apart): the model had the result by
    then, as the round after a gateway call was sent it."""
    seen = model_items([mcp_call("a"), CLIENT_CALL, CLIENT_ANSWER])
    assert shape(seen) == [
        ("function_call", "a"),
        ("function_call_output", "a"),
        ("function_call", "c"),
        ("function_call_output", "c"),
    ]


def test_a_client_call_after_a_web_search_comes_after_its_results() -> None:
    search = {"id": "ws", "type": "web_search_call", "status": "completed", "action": {}}
    seen = model_items([search, CLIENT_CALL, CLIENT_ANSWER])
    assert shape(seen) == [
        ("function_call", "ws"),
        ("function_call_output", "ws"),
        ("function_call", "c"),
        ("function_call_output", "c"),
    ]


def test_a_gateway_call_made_with_a_client_call_before_it_stays_in_its_round() -> None:
    """The client call's output comes after the gateway call: one round of two calls."""
    seen = model_items([CLIENT_CALL, mcp_call("a"), CLIENT_ANSWER])
    assert shape(seen) == [
        ("function_call", "c"),
        ("function_call", "a"),
        ("function_call_output", "c"),
        ("function_call_output", "a"),
    ]


def test_a_client_call_after_an_approved_call_comes_after_its_result() -> None:
    """The approved call ran before the next response's first round."""
    approve = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}
    ran = mcp_call("m", "42", approval_request_id="r")
    seen = model_items([REQUEST, approve, ran, CLIENT_CALL, CLIENT_ANSWER])
    assert shape(seen) == [
        ("function_call", "r"),
        ("function_call_output", "r"),
        ("function_call", "c"),
        ("function_call_output", "c"),
    ]


@pytest.mark.parametrize("approve", [True, False])
def test_an_approval_request_made_with_a_client_call_stays_in_its_round(approve: bool) -> None:
    """Both calls went back to the client; the answers to both come after them."""
    answer = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": approve}
    items = [REQUEST, CLIENT_CALL, CLIENT_ANSWER, answer]
    if approve:
        items.append(mcp_call("m", "42", approval_request_id="r"))
    seen = model_items(items)
    assert shape(seen) == [
        ("function_call", "r"),
        ("function_call", "c"),
        ("function_call_output", "r"),
        ("function_call_output", "c"),
    ]
    assert seen[2]["output"] == ("42" if approve else DECLINED)


@pytest.mark.parametrize("approve", [True, False])
def test_an_answer_sent_before_its_request_follows_the_call(approve: bool) -> None:
    answer = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": approve}
    items = [answer, mcp_call("m", "42", approval_request_id="r")] if approve else [answer]
    seen = model_items([*items, REQUEST, answer])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == ("42" if approve else DECLINED)


def test_an_unanswered_approval_request_is_left_out_and_a_denied_one_is_declined() -> None:
    request = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}
    assert model_items([request]) == []
    deny = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": False}
    seen = model_items([request, deny])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == DECLINED


def test_a_denials_reason_is_told_to_the_model() -> None:
    """``reason`` ("Optional reason for the decision") is what the model needs to go on
    without the call: it follows the word that the call was declined."""
    deny = {
        "type": "mcp_approval_response",
        "approval_request_id": "r",
        "approve": False,
        "reason": "Do not touch production.",
    }
    seen = model_items([REQUEST, deny])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == (
        "The user declined to run this tool call. Their reason: Do not touch production."
    )
    for blank in ("", "  ", None):
        assert model_items([REQUEST, {**deny, "reason": blank}])[1]["output"] == DECLINED


def test_an_approved_call_answers_its_request() -> None:
    request = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}
    approve = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}
    seen = model_items([request, approve, mcp_call("m", "42", approval_request_id="r")])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == "42"


def test_a_failed_or_cut_short_call_tells_the_model() -> None:
    failed = mcp_call("a", None, error="boom")
    cut = mcp_call("b", None, status="incomplete")
    outputs = [i["output"] for i in model_items([failed, cut]) if "output" in i]
    assert outputs == ["Error: boom", "The call did not complete."]


@pytest.mark.parametrize(
    ("error", "told"),
    [
        ("boom", "boom"),  # stored before errors were objects
        ({"type": "mcp_protocol_error", "code": -32602, "message": "bad"}, "bad"),
        ({"type": "http_error", "code": 503, "message": "down"}, "down"),
        (
            {
                "type": "mcp_tool_execution_error",
                "content": [{"type": "text", "text": "a"}, {"type": "image", "data": "x"}],
            },
            'a\n{"type":"image","data":"x"}',
        ),
        (  # only a text block is told as its text: a resource's text is part of its JSON
            {
                "type": "mcp_tool_execution_error",
                "content": [{"type": "resource", "uri": "file:///a", "text": "body"}],
            },
            '{"type":"resource","uri":"file:///a","text":"body"}',
        ),
        ({"type": "mcp_tool_execution_error", "content": []}, "the tool reported an error"),
        ({"type": "mcp_tool_execution_error", "content": "plain"}, "plain"),
        ({"type": "mcp_tool_execution_error", "content": {"n": 1}}, '{"n":1}'),
        ({"type": "mcp_tool_execution_error"}, "the tool reported an error"),
        (
            {"type": "mcp_protocol_error", "code": 1, "message": ""},
            '{"type":"mcp_protocol_error","code":1,"message":""}',
        ),
        (["odd"], '["odd"]'),
    ],
)
def test_a_failed_calls_error_is_told_as_text(error: object, told: str) -> None:
    assert error_text(error) == told
    [_, output] = model_items([mcp_call("a", None, status="failed", error=error)])
    assert output["output"] == f"Error: {told}"


def test_a_web_search_replays_its_numbered_results() -> None:
    sources = [{"type": "url", "url": "https://a.test", "title": "A", "snippet": "about a"}]
    item = {
        "id": "ws",
        "type": "web_search_call",
        "status": "completed",
        "action": {"type": "search", "query": "q", "sources": sources},
    }
    call, output = model_items([item])
    assert call["arguments"] == '{"query":"q"}'
    assert output["output"] == "[1] A\nURL: https://a.test\nabout a"


def test_an_mcp_call_is_replayed_as_the_prefixed_function_call_the_model_made() -> None:
    assert model_items([mcp_call("a", arguments='{"x":1}')])[0] == {
        "type": "function_call",
        "call_id": "a",
        "name": "s__t",
        "arguments": '{"x":1}',
    }
    assert model_items([mcp_call("b", arguments="")])[0]["arguments"] == "{}"


def test_a_call_without_output_error_or_end_gives_the_model_nothing() -> None:
    running = mcp_call("a", None, status="in_progress")
    assert model_items([running])[1] == {
        "type": "function_call_output",
        "call_id": "a",
        "output": "",
    }


def test_an_approved_request_whose_call_is_missing_is_left_out() -> None:
    request = {"id": "r", "type": "mcp_approval_request", "server_label": "s", "name": "t"}
    approve = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}
    assert model_items([request, approve]) == []


def web_search_call(status: str = "completed", **fields: Any) -> dict[str, Any]:
    return {"id": "ws_1", "type": "web_search_call", "status": status, **fields}


def test_a_web_search_is_a_call_of_its_query_and_its_results_as_the_output() -> None:
    sources = [
        {"type": "url", "url": "https://a.test", "title": "A", "snippet": "about a"},
        {"type": "url", "url": "https://b.test", "snippet": ""},
    ]
    item = web_search_call(action={"type": "search", "query": "q", "sources": sources})
    assert model_items([item]) == [
        {
            "type": "function_call",
            "call_id": "ws_1",
            "name": "web_search",
            "arguments": '{"query":"q"}',
        },
        {
            "type": "function_call_output",
            "call_id": "ws_1",
            "output": "[1] A\nURL: https://a.test\nabout a\n\n[2] https://b.test\nURL: https://b.test",
        },
    ]


def test_a_hosted_searchs_data_source_is_named_not_given_as_a_url_of_none() -> None:
    """Hosted search answers some queries from its own data (``{"type": "api", "name":
    "oai-weather"}``, no ``url``): the model is told which, never ``URL: None``."""
    sources = [
        {"type": "api", "name": "oai-weather"},
        {"type": "url", "url": "https://a.test/"},
        {"type": "api"},
        {"type": "api", "name": "", "url": ""},  # empty strings name no source, no URL
    ]
    item = web_search_call(action={"type": "search", "query": "weather", "sources": sources})
    _, output = model_items([item])
    assert output["output"] == (
        "[1] oai-weather (a data source, not a web page)\n\n"
        "[2] https://a.test/\nURL: https://a.test/\n\n"
        "[3] a data source, not a web page\n\n"
        "[4] a data source, not a web page"
    )


def test_a_web_search_is_a_call_of_the_name_the_search_is_offered_by() -> None:
    """Beside a client's tool called ``web_search``, the gateway's is offered (and its
    earlier searches shown) apart."""
    item = web_search_call(action={"type": "search", "query": "q", "sources": []})
    mine = {"type": "function_call", "call_id": "c", "name": "web_search", "arguments": "{}"}
    seen = model_items([item, mine], names=names_beside("web_search"))
    assert [(i["type"], i.get("name")) for i in seen] == [
        ("function_call", "gateway_web_search"),
        ("function_call_output", None),
        ("function_call", "web_search"),
    ]


def test_an_mcp_call_is_a_call_of_the_name_its_tool_is_offered_by() -> None:
    """Beside a client's function called ``s__t``, the server ``s``'s tool ``t`` is offered
    (and its earlier calls shown) apart; so is the call an approval request asked for."""
    mine = {"type": "function_call", "call_id": "c", "name": "s__t", "arguments": "{}"}
    asked = {**REQUEST, "server_label": "s", "name": "t"}
    ran = mcp_call("m2", approval_request_id=asked["id"])
    items = [mcp_call("m1"), asked, ran, mine]
    seen = model_items(items, names=names_beside("s__t"))
    assert [(i["type"], i.get("name")) for i in seen] == [
        ("function_call", "gateway_s__t"),
        ("function_call_output", None),
        ("function_call", "gateway_s__t"),
        ("function_call_output", None),
        ("function_call", "s__t"),
    ]


def test_a_tool_search_is_a_call_of_the_name_the_search_is_offered_by() -> None:
    call = {"type": "tool_search_call", "call_id": "c", "arguments": {"query": "q"}}
    seen = model_items(
        [call, search_output(call_id="c", tools=[])], names=names_beside("tool_search")
    )
    assert [i.get("name") for i in seen] == ["gateway_tool_search", None]


@pytest.mark.parametrize(
    ("item", "arguments", "output"),
    [
        (
            web_search_call(action={"type": "search", "query": "q", "sources": []}),
            '{"query":"q"}',
            "No results.",
        ),
        (  # sent back without its sources (Codex keeps only the query)
            web_search_call(action={"type": "search", "query": "q"}),
            '{"query":"q"}',
            RESULTS_NOT_KEPT,
        ),
        (web_search_call(), '{"query":""}', RESULTS_NOT_KEPT),
        (  # a hosted search of several queries (Codex sends it back as it came)
            web_search_call(action={"type": "search", "queries": ["a b", "c"]}),
            '{"query":"a b, c"}',
            RESULTS_NOT_KEPT,
        ),
        (
            web_search_call(action={"type": "search", "query": "q", "queries": ["a", "b"]}),
            '{"query":"q"}',
            RESULTS_NOT_KEPT,
        ),
        (
            web_search_call(action={"type": "search", "sources": "odd"}),
            '{"query":""}',
            RESULTS_NOT_KEPT,
        ),
        (
            web_search_call("failed", action={"query": "q"}, error="503"),
            '{"query":"q"}',
            "Error: 503",
        ),
        (web_search_call("failed"), '{"query":""}', "Error: the search failed."),
    ],
)
def test_a_web_search_without_results_tells_the_model_so(
    item: dict[str, Any], arguments: str, output: str
) -> None:
    call, result = model_items([item])
    assert call["arguments"] == arguments
    assert result == {"type": "function_call_output", "call_id": "ws_1", "output": output}


@pytest.mark.parametrize(
    ("action", "arguments", "output"),
    [
        (
            {"type": "open_page", "url": "https://a.test/pricing"},
            '{"url":"https://a.test/pricing"}',
            f"The page https://a.test/pricing was opened. {PAGE_NOT_KEPT}",
        ),
        ({"type": "open_page"}, "{}", f"A page was opened. {PAGE_NOT_KEPT}"),
        (
            {"type": "find_in_page", "url": "https://a.test/", "pattern": "price"},
            '{"url":"https://a.test/","pattern":"price"}',
            f"'price' was looked for in the page https://a.test/. {FOUND_NOT_KEPT}",
        ),
        (  # the action's first name, in an older client's history
            {"type": "find", "url": "https://a.test/", "pattern": "price"},
            '{"url":"https://a.test/","pattern":"price"}',
            f"'price' was looked for in the page https://a.test/. {FOUND_NOT_KEPT}",
        ),
        ({"type": "find_in_page"}, "{}", f"A pattern was looked for in a page. {FOUND_NOT_KEPT}"),
        (  # empty strings name nothing: no "the page " of no URL, no '' looked for
            {"type": "find_in_page", "url": "", "pattern": ""},
            '{"url":"","pattern":""}',
            f"A pattern was looked for in a page. {FOUND_NOT_KEPT}",
        ),
        ({"type": "open_page", "url": ""}, '{"url":""}', f"A page was opened. {PAGE_NOT_KEPT}"),
    ],
)
def test_a_hosted_page_action_is_replayed_as_what_it_did_not_as_an_empty_search(
    action: dict[str, Any], arguments: str, output: str
) -> None:
    """Hosted output (a client or Codex sends it back) opens a page or looks in one: the
    model sees that page or pattern, never a search for nothing."""
    call, result = model_items([web_search_call(action=action)])
    assert (call["name"], call["arguments"]) == ("web_search", arguments)
    # the output answers the call: a backend pairs them by ``call_id``
    assert result == {"type": "function_call_output", "call_id": call["call_id"], "output": output}


def test_a_failed_page_action_is_replayed_with_its_page_and_its_error() -> None:
    item = web_search_call("failed", action={"type": "open_page", "url": "https://a.test/"})
    call, result = model_items([{**item, "error": "unavailable"}])
    assert call["arguments"] == '{"url":"https://a.test/"}'
    assert result["output"] == "Error: unavailable"


WEATHER = {"type": "function", "name": "get_weather"}
CRM = {"type": "namespace", "name": "crm", "tools": [{"type": "function", "name": "list_orders"}]}


def search_output(**fields: Any) -> dict[str, Any]:
    return {"type": "tool_search_output", "execution": "server", "status": "completed", **fields}


@pytest.mark.parametrize(
    ("output", "told"),
    [
        (
            search_output(tools=[WEATHER, CRM]),
            "Loaded tools: get_weather, crm__list_orders. They can be called now.",
        ),
        (search_output(tools=[]), "No tools matched the search."),
        (
            search_output(status="incomplete", error="boom"),
            "The tool search did not complete: boom",
        ),
        (search_output(status="incomplete", error=""), "The tool search did not complete."),
        (search_output(status="incomplete"), "The tool search did not complete."),
    ],
)
def test_a_tool_search_output_tells_the_model_what_it_may_call_now(
    output: dict[str, Any], told: str
) -> None:
    call = {"type": "tool_search_call", "call_id": "c", "arguments": {"query": "q"}}
    assert model_items([call, {**output, "call_id": "c"}]) == [
        {
            "type": "function_call",
            "call_id": "c",
            "name": "tool_search",
            "arguments": '{"query":"q"}',
        },
        {"type": "function_call_output", "call_id": "c", "output": told},
    ]


def test_a_search_output_answers_the_search_its_call_id_names() -> None:
    first = {"type": "tool_search_call", "call_id": "c1", "arguments": {"query": "one"}}
    second = {"type": "tool_search_call", "call_id": "c2", "arguments": {"query": "two"}}
    answer = search_output(call_id="c1", tools=[])
    seen = model_items([first, second, answer])
    assert [(i["type"], i["call_id"]) for i in seen] == [
        ("function_call", "c1"),
        ("function_call_output", "c1"),
    ]


def test_a_hosted_search_without_call_ids_pairs_by_item_id_and_order() -> None:
    hosted = {"type": "tool_search_call", "id": "tsc_1", "arguments": {"query": "q"}}
    answer = search_output(tools=[])
    seen = model_items([hosted, answer])
    assert [(i["type"], i["call_id"]) for i in seen] == [
        ("function_call", "tsc_1"),
        ("function_call_output", "tsc_1"),
    ]
    assert model_items([answer]) == []  # an output answering no search is left out


def test_only_shell_items_are_rewritten_as_shell_calls() -> None:
    message = {"type": "message", "role": "user", "content": "hi"}
    call = {
        "id": "sh_1",
        "type": "shell_call",
        "call_id": "c1",
        "action": {"commands": ["ls"]},
        "status": "completed",
    }
    seen = model_items([message, call])
    assert seen[0] == message
    assert seen[1]["name"] == "shell"


def test_a_namespace_members_custom_call_reaches_the_model_under_its_flat_name() -> None:
    call = {
        "type": "custom_tool_call",
        "call_id": "c",
        "name": "x",
        "namespace": "ns",
        "input": "i",
    }
    assert model_items([call])[0]["name"] == "ns__x"


def test_a_call_naming_a_request_not_in_the_history_stands_alone() -> None:
    seen = model_items([mcp_call("m", "42", approval_request_id="gone")])
    assert shape(seen) == [("function_call", "m"), ("function_call_output", "m")]
    assert seen[1]["output"] == "42"


def test_an_approved_call_answers_its_request_when_the_approval_is_not_in_the_history() -> None:
    seen = model_items([REQUEST, mcp_call("m", "42", approval_request_id="r")])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == "42"


def test_an_approved_calls_result_comes_where_the_client_approved_it() -> None:
    """At the approval, not at the ``mcp_call`` that ran after the client's next message."""
    approve = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": True}
    user = {"type": "message", "role": "user", "content": "go on"}
    seen = model_items([REQUEST, approve, user, mcp_call("m", "42", approval_request_id="r")])
    assert [i["type"] for i in seen] == ["function_call", "function_call_output", "message"]
    assert seen[1]["output"] == "42"


def test_a_denial_sent_only_before_its_request_still_answers_it() -> None:
    deny = {"type": "mcp_approval_response", "approval_request_id": "r", "approve": False}
    seen = model_items([deny, REQUEST])
    assert shape(seen) == [("function_call", "r"), ("function_call_output", "r")]
    assert seen[1]["output"] == DECLINED


def test_listings_and_stray_approvals_are_not_shown_to_the_model() -> None:
    user = {"type": "message", "role": "user", "content": "go on"}
    listing = {"id": "mcpl_1", "type": "mcp_list_tools", "server_label": "s", "tools": []}
    stray = {"type": "mcp_approval_response", "approval_request_id": "gone", "approve": True}
    assert model_items([listing, stray, mcp_call("a"), user]) == [
        *model_items([mcp_call("a")]),
        user,
    ]
