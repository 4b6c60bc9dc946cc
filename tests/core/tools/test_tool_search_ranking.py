"""The gateway's tool search on its own: the ``tool_search`` function the model reads (what
is searchable), the items, and which deferred tools a query loads."""

from __future__ import annotations

import time
from typing import Any

import pytest
from openai.types.responses import ResponseToolSearchCall, ResponseToolSearchOutputItem

from stateway.core.tools import tool_search
from stateway.core.tools.catalog import Catalog
from tests.core.tools.wire import is_id, sdk_item


def fn(name: str, description: str | None = None) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "function", "name": name, "defer_loading": True}
    if description is not None:
        tool["description"] = description
    return tool


def group(name: str, description: str | None, *members: dict[str, Any]) -> dict[str, Any]:
    tool: dict[str, Any] = {"type": "namespace", "name": name, "tools": list(members)}
    if description is not None:
        tool["description"] = description
    return tool


def found(query: str, tools: list[dict[str, Any]], limit: int = 10) -> list[str]:
    """The model-visible names a search loads, in the order it returns them."""
    catalog = Catalog(tools, defer=True)
    out = []
    for tool in tool_search.search(query, catalog.deferred(), catalog.namespaces, limit):
        if tool["type"] == "namespace":
            out += [f"{tool['name']}__{m['name']}" for m in tool["tools"]]
        else:
            out.append(tool["name"])
    return out


def description(tools: list[dict[str, Any]], declared: dict[str, Any] | None = None) -> str:
    catalog = Catalog(tools, defer=True)
    entry = tool_search.entry(
        declared or {"type": "tool_search"}, catalog.deferred(), catalog.namespaces
    )
    return str(entry.function["description"])


# -- what the model reads ------------------------------------------------------------


def test_the_function_lists_each_deferred_tool_and_group_once_by_its_first_line() -> None:
    tools = [
        group("crm", "Customer records.\nMore.", fn("list_orders"), fn("find_customer")),
        fn("undescribed"),
        fn("get_weather", "Current weather.\nSecond line.\nThird line."),
        {"type": "function", "name": "always"},
    ]
    assert description(tools) == (
        f"{tool_search.DESCRIPTION}\n\nSearchable tools:\n"
        "- crm (a group of tools): Customer records.\n"
        "- undescribed\n"
        "- get_weather: Current weather."
    )


def test_a_server_search_keeps_its_own_description_and_parameters() -> None:
    declared = {"type": "tool_search", "description": "Mine.", "parameters": {"type": "object"}}
    catalog = Catalog([], defer=True)
    function = tool_search.entry(declared, [], catalog.namespaces).function
    assert function == {
        "type": "function",
        "name": "tool_search",
        "description": tool_search.DESCRIPTION,
        "parameters": tool_search.PARAMETERS,
        "strict": False,
    }
    client = {**declared, "execution": "client", "parameters": "not a schema"}
    function = tool_search.entry(client, [], catalog.namespaces).function
    assert (function["description"], function["parameters"]) == ("Mine.", tool_search.PARAMETERS)


@pytest.mark.parametrize(("length", "shown"), [(120, "x" * 120), (121, "x" * 117 + "...")])
def test_a_long_description_is_cut_to_120_characters(length: int, shown: str) -> None:
    assert description([fn("t", "x" * length)]).endswith(f"- t: {shown}")


@pytest.mark.parametrize(("count", "more"), [(64, None), (66, "- ... and 2 more")])
def test_at_most_64_tools_are_listed(count: int, more: str | None) -> None:
    lines = description([fn(f"t{i}") for i in range(count)]).split("\n")[3:]
    assert lines[:64] == [f"- t{i}" for i in range(64)]
    assert lines[64:] == ([more] if more else [])


def test_the_items_of_a_gateway_search() -> None:
    """Neither has a ``call_id``, as hosted: the search is the server's."""
    call = tool_search.call_item(None, "server")
    assert is_id(call["id"], "tsc")
    assert call == {
        "id": call["id"],
        "type": "tool_search_call",
        "status": "in_progress",
        "call_id": None,
        "execution": "server",
        "arguments": {},
    }
    assert isinstance(sdk_item(call), ResponseToolSearchCall)
    output = tool_search.output_item([fn("t")])
    assert is_id(output["id"], "tso")
    assert output == {
        "id": output["id"],
        "type": "tool_search_output",
        "status": "completed",
        "call_id": None,
        "execution": "server",
        "tools": [fn("t")],
    }
    assert isinstance(sdk_item(output), ResponseToolSearchOutputItem)
    failed = tool_search.output_item([], "no query")
    assert (failed["status"], failed["error"], failed["tools"]) == ("incomplete", "no query", [])


def test_a_limit_is_a_number_in_the_arguments_object() -> None:
    assert tool_search.limit_of({"limit": 3}) == 3
    assert tool_search.limit_of({"limit": 99}) == tool_search.MAX_LOADED
    assert tool_search.limit_of({"limit": 0}) == 1
    assert tool_search.limit_of({"limit": True}) == tool_search.MAX_LOADED
    assert tool_search.limit_of("plain words") == tool_search.MAX_LOADED


# -- what a query finds ----------------------------------------------------------------


def test_a_name_outweighs_a_description_under_a_limit() -> None:
    tools = [fn("notes", "Mentions an invoice."), fn("lookup_invoice", "Find a bill.")]
    assert found("invoice", tools, limit=1) == ["lookup_invoice"]
    assert found("invoice", tools) == ["notes", "lookup_invoice"]  # declaration order


def test_a_word_in_a_name_is_worth_three_in_descriptions() -> None:
    # a tie keeps declaration order: one word in a name against three in a description
    described = fn("helper", "alpha beta gamma")
    named = fn("alpha_tool")
    assert found("alpha beta gamma", [described, named], limit=1) == ["helper"]
    assert found("alpha beta gamma", [named, described], limit=1) == ["alpha_tool"]


def test_descriptions_count_for_each_word() -> None:
    tools = [fn("first", "alpha"), fn("second", "alpha beta")]
    assert found("alpha beta", tools, limit=1) == ["second"]


def test_a_namespace_name_and_description_find_its_members() -> None:
    crm = group("crm", "Customer records.", fn("ping"), fn("list_orders", "Open orders."))
    assert found("crm", [crm]) == ["crm__ping", "crm__list_orders"]
    assert found("customer", [crm]) == ["crm__ping", "crm__list_orders"]
    assert found("orders", [fn("report", "Weekly orders."), crm], limit=1) == ["crm__list_orders"]


def test_members_found_together_come_back_as_one_namespace() -> None:
    crm = group("crm", None, fn("list_orders"), fn("cancel_orders"))
    catalog = Catalog([crm], defer=True)
    assert tool_search.search("orders", catalog.deferred(), catalog.namespaces) == [
        {
            "type": "namespace",
            "name": "crm",
            "description": "",
            "tools": [fn("list_orders"), fn("cancel_orders")],
        }
    ]


@pytest.mark.parametrize(
    ("query", "name", "hit"),
    [
        ("weather", "getWeather", True),
        ("bill", "billing", True),  # four letters: a prefix counts
        ("billings", "billing", True),
        ("ord", "orders", False),  # three: it does not
    ],
)
def test_words_match_whole_in_camel_case_or_by_a_long_prefix(
    query: str, name: str, hit: bool
) -> None:
    assert found(query, [fn(name)]) == ([name] if hit else [])


def test_a_query_counts_its_first_32_distinct_words() -> None:
    """Each word is compared with each tool's (by prefix too), on the event loop: a
    model's query of 12,000 words over 1,000 tools took 33 s, every request stalled."""
    filler = " ".join(f"word{n}" for n in range(31))
    tools = [fn("get_weather"), fn("list_orders")]
    assert found(f"{filler} weather weather", tools) == ["get_weather"]
    assert found(f"{filler} filler weather", tools) == []


def test_a_long_query_over_many_tools_takes_no_time() -> None:
    many = [fn(f"tool_{n}", f"Does thing {n} with widgets.") for n in range(1000)]
    query = " ".join(f"word{n}" for n in range(12_000))
    started = time.monotonic()
    assert found(query, many) == []
    assert time.monotonic() - started < 2
