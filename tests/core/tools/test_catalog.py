import re
from typing import Any

import pytest

from stateway.core.tools import mcp, tool_search, web_search
from stateway.core.tools.catalog import Catalog, model_tools
from stateway.core.tools.custom_tools import custom_input
from stateway.core.tools.history import model_items
from stateway.core.tools.mcp_binding import Approval, McpBinding
from stateway.core.tools.model_names import apart_name, model_name
from stateway.core.tools.ports import McpServer, McpTool

FUNCTION = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [{"type": "function", "name": "spawn", "description": "Spawn an agent"}],
}


def test_namespace_members_are_offered_under_flat_names() -> None:
    assert model_tools([FUNCTION, NAMESPACE]) == [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "function", "name": "multi_agent_v1__spawn", "description": "Spawn an agent"},
    ]


def test_a_member_call_gets_its_public_name_and_namespace() -> None:
    catalog = Catalog([FUNCTION, NAMESPACE])
    call = catalog.public_call({"type": "function_call", "name": "multi_agent_v1__spawn"})
    assert call == {"type": "function_call", "name": "spawn", "namespace": "multi_agent_v1"}
    assert catalog.public_call(dict(call)) == call  # restoring twice changes nothing
    plain = catalog.public_call({"type": "function_call", "name": "exec_command"})
    assert plain == {"type": "function_call", "name": "exec_command"}
    unknown = catalog.public_call({"type": "function_call", "name": "nope"})
    assert unknown == {"type": "function_call", "name": "nope"}


def test_prior_member_calls_reach_the_model_flattened() -> None:
    stored = {
        "type": "function_call",
        "call_id": "c",
        "name": "spawn",
        "namespace": "multi_agent_v1",
        "arguments": "{}",
    }
    [sent] = model_items([stored])
    assert sent == {
        "type": "function_call",
        "call_id": "c",
        "name": "multi_agent_v1__spawn",
        "arguments": "{}",
    }
    assert stored["name"] == "spawn"  # the stored item keeps its public shape


APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Apply a patch.",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/"},
}


def test_a_custom_tool_is_a_function_of_one_string_with_its_grammar_described() -> None:
    [function] = model_tools([APPLY_PATCH])
    assert (function["type"], function["name"]) == ("function", "apply_patch")
    assert function["parameters"]["properties"] == {
        "input": {"type": "string", "description": "The tool's raw input."}
    }
    assert function["description"].startswith("Apply a patch.")
    assert "lark grammar:\nstart: /.+/" in function["description"]
    assert Catalog([APPLY_PATCH]).is_custom("apply_patch")
    assert not Catalog([FUNCTION]).is_custom("exec_command")


def test_custom_calls_and_outputs_reach_the_model_as_function_ones() -> None:
    call = {"type": "custom_tool_call", "id": "ctc_1", "call_id": "c", "name": "x", "input": "a\n"}
    output = {"type": "custom_tool_call_output", "id": "o", "call_id": "c", "output": "done"}
    assert model_items([call, output]) == [
        {"type": "function_call", "call_id": "c", "name": "x", "arguments": '{"input":"a\\n"}'},
        {"type": "function_call_output", "call_id": "c", "output": "done"},
    ]


def test_custom_input_takes_the_input_string_or_the_raw_arguments() -> None:
    assert custom_input('{"input": "raw text"}') == "raw text"
    assert custom_input("not json") == "not json"
    assert custom_input('{"other": 1}') == '{"other": 1}'


def test_an_additional_tools_item_never_reaches_the_model() -> None:
    extra = {"type": "additional_tools", "role": "developer", "tools": [FUNCTION]}
    message = {"type": "message", "role": "user", "content": "hi"}
    assert model_items([extra, message]) == [message]


def named(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name}


def test_loading_skips_what_cannot_be_offered_and_keeps_the_rest() -> None:
    hint = {"type": "web_search"}
    catalog = Catalog([FUNCTION, {**named("late"), "defer_loading": True}], defer=True)
    assert catalog.load([FUNCTION, hint, named("late")]) == ["late"]


def test_loading_a_member_of_a_deferred_namespace_offers_it() -> None:
    catalog = Catalog([{**NAMESPACE, "defer_loading": True}], defer=True)
    assert catalog.load([NAMESPACE]) == ["multi_agent_v1__spawn"]
    assert [t["name"] for t in catalog.model_tools()] == ["multi_agent_v1__spawn"]


def test_each_namespace_is_known_by_its_own_declaration() -> None:
    other = {**NAMESPACE, "name": "other", "description": "others"}
    assert Catalog([FUNCTION, NAMESPACE, other]).namespaces == {
        "multi_agent_v1": NAMESPACE,
        "other": other,
    }


def test_a_strict_function_stays_strict() -> None:
    strict = {**FUNCTION, "strict": True}
    assert model_tools([strict]) == [strict]


@pytest.mark.parametrize(
    ("choice", "model_choice"),
    [
        ({"type": "allowed_tools", "mode": "required", "tools": []}, "required"),
        ({"type": "allowed_tools", "tools": []}, "auto"),
        ({"type": "web_search"}, {"type": "function", "name": "web_search"}),
        ({"type": "web_search_preview"}, {"type": "function", "name": "web_search"}),
        ({"type": "mcp", "server_label": "b"}, "required"),
        ({"type": "mcp", "server_label": "c"}, "auto"),
        (
            {"type": "mcp", "server_label": "b", "name": "add"},
            {"type": "function", "name": "b__add"},
        ),
        (
            {"type": "mcp", "server_label": "b", "name": "sub"},
            {"type": "function", "name": "b__sub"},
        ),
        ({"type": "mcp", "server_label": "b", "name": "mul"}, "auto"),
        (
            {"type": "function", "name": "spawn", "namespace": "multi_agent_v1"},
            {"type": "function", "name": "multi_agent_v1__spawn"},
        ),
        ({"type": "function", "name": "spawn"}, "auto"),
    ],
)
def test_a_tool_choice_names_the_model_visible_function(
    choice: dict[str, Any], model_choice: str | dict[str, Any]
) -> None:
    catalog = Catalog([FUNCTION, NAMESPACE])
    mcp_add = McpTool("add", {"type": "object"})
    mcp_sub = McpTool("sub", {"type": "object"})
    for label in ("a", "b"):
        server = McpBinding(McpServer(label, f"http://{label}.test"), None, False, Approval(False))
        for entry in mcp.entries(server, [mcp_add, mcp_sub]):
            catalog.add(entry)
    catalog.add(web_search.entry({"type": "web_search"}))
    assert catalog.model_choice(choice) == model_choice


@pytest.mark.parametrize(
    ("usual", "taken", "name"),
    [
        ("web_search", (), "web_search"),
        ("web_search", ("gateway_web_search",), "web_search"),
        ("web_search", ("web_search",), "gateway_web_search"),
        ("web_search", ("web_search", "gateway_web_search"), "gateway_web_search_2"),
        (
            "web_search",
            ("web_search", "gateway_web_search", "gateway_web_search_2"),
            "gateway_web_search_3",
        ),
        ("docs__add", ("docs__add",), "gateway_docs__add"),
        ("tool_search", ("tool_search",), "gateway_tool_search"),
    ],
)
def test_a_gateway_tool_takes_a_name_no_other_tool_has(
    usual: str, taken: tuple[str, ...], name: str
) -> None:
    assert apart_name(usual, set(taken)) == name


def test_a_name_apart_is_one_strict_model_apis_take() -> None:
    usual = model_name("t" * 61, "s")  # 64 characters: room for no prefix
    assert usual == "s__" + "t" * 61, "64 characters are taken as they are"
    apart = apart_name(usual, {usual})
    again = apart_name(usual, {usual, apart})
    for name in (apart, again):
        assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name), name
    assert len({usual, apart, again}) == 3


def binding(label: str) -> McpBinding:
    return McpBinding(McpServer(label, f"http://{label}.test"), None, False, Approval(False))


def test_a_clients_function_named_web_search_stays_its_own_beside_the_gateways() -> None:
    """Hosted Responses takes a function called ``web_search`` beside its web search: the
    gateway's is offered apart, and each choice reaches its own."""
    mine = {"type": "function", "name": "web_search", "parameters": {"type": "object"}}
    catalog = Catalog([mine])
    assert catalog.names().of("web_search") == "gateway_web_search"  # before it is offered
    assert catalog.add(web_search.entry({"type": "web_search"}))
    assert [tool["name"] for tool in catalog.model_tools()] == ["web_search", "gateway_web_search"]
    assert [tool["name"] for tool in catalog.model_tools(gateway=False)] == ["web_search"]
    assert catalog.entry("web_search").kind == "function"  # type: ignore[union-attr]
    assert catalog.entry("gateway_web_search").kind == "web_search"  # type: ignore[union-attr]
    assert catalog.names().of("web_search") == "gateway_web_search"
    searched = catalog.model_choice({"type": "web_search"})
    assert searched == {"type": "function", "name": "gateway_web_search"}
    named = catalog.model_choice({"type": "function", "name": "web_search"})
    assert named == {"type": "function", "name": "web_search"}


def test_a_gateway_tool_keeps_its_name_beside_no_other() -> None:
    catalog = Catalog([])
    catalog.add(web_search.entry({"type": "web_search"}))
    assert catalog.model_tools()[0]["name"] == catalog.names().of("web_search") == "web_search"


def test_a_clients_function_named_as_an_mcp_tool_stays_its_own_beside_it() -> None:
    """Hosted Responses keeps an MCP server's tools apart from the functions (they are the
    server's, by label): a function called ``docs__add`` and the tool ``add`` of the server
    ``docs`` are both offered, and each call reaches its own."""
    mine = {"type": "function", "name": "docs__add", "parameters": {"type": "object"}}
    catalog = Catalog([mine])
    tools = [McpTool("add", {"type": "object"}), McpTool("sub", {"type": "object"})]
    for entry in mcp.entries(binding("docs"), tools):
        assert catalog.add(entry)
    offered = [tool["name"] for tool in catalog.model_tools()]
    assert offered == ["docs__add", "gateway_docs__add", "docs__sub"]
    assert catalog.entry("docs__add").kind == "function"  # type: ignore[union-attr]
    theirs = catalog.entry("gateway_docs__add")
    assert theirs is not None
    assert (theirs.kind, theirs.server_label, theirs.name) == ("mcp", "docs", "add")
    choice = catalog.model_choice({"type": "mcp", "server_label": "docs", "name": "add"})
    assert choice == {"type": "function", "name": "gateway_docs__add"}
    names = catalog.names()
    assert (names.of("docs__add"), names.of("docs__sub")) == ("gateway_docs__add", "docs__sub")
    assert names.of("other__tool") == "other__tool"  # an earlier turn's, of no taken name


def test_a_tool_a_server_lists_twice_is_offered_once() -> None:
    catalog = Catalog([])
    [entry] = mcp.entries(binding("docs"), [McpTool("add", {"type": "object"})])
    assert catalog.add(entry)
    assert not catalog.add(entry)
    assert [tool["name"] for tool in catalog.model_tools()] == ["docs__add"]


def test_a_gateway_tool_named_as_another_ones_apart_name_goes_apart_too() -> None:
    """``gateway_docs__add`` is the usual name of the server ``gateway_docs``'s ``add``
    as well: whichever comes second is numbered."""
    catalog = Catalog([{"type": "function", "name": "docs__add"}])
    for label in ("docs", "gateway_docs"):
        for entry in mcp.entries(binding(label), [McpTool("add", {"type": "object"})]):
            assert catalog.add(entry)
    offered = [tool["name"] for tool in catalog.model_tools()]
    assert offered == ["docs__add", "gateway_docs__add", "gateway_gateway_docs__add"]
    assert catalog.entry("gateway_gateway_docs__add").server_label == "gateway_docs"  # type: ignore[union-attr]


def test_a_clients_function_named_tool_search_stays_its_own_beside_the_search() -> None:
    mine = {"type": "function", "name": "tool_search", "parameters": {"type": "object"}}
    weather = {"type": "function", "name": "get_weather", "defer_loading": True}
    catalog = Catalog([mine, weather], defer=True)
    declared = {"type": "tool_search"}
    assert catalog.add(tool_search.entry(declared, catalog.deferred(), catalog.namespaces))
    assert [tool["name"] for tool in catalog.model_tools()] == [
        "tool_search",
        "gateway_tool_search",
    ]
    assert catalog.entry("gateway_tool_search").kind == "tool_search"  # type: ignore[union-attr]
    choice = catalog.model_choice({"type": "tool_search"})
    assert choice == {"type": "function", "name": "gateway_tool_search"}
    assert catalog.names().of("tool_search") == "gateway_tool_search"


def test_a_function_a_search_loads_keeps_its_name_beside_a_gateway_tool() -> None:
    """A deferred function holds its name from the start: the MCP tool of that name is
    offered apart, and loading the function later offers it under its own."""
    deferred = {"type": "function", "name": "docs__add", "defer_loading": True}
    catalog = Catalog([deferred], defer=True)
    for entry in mcp.entries(binding("docs"), [McpTool("add", {"type": "object"})]):
        assert catalog.add(entry)
    assert [tool["name"] for tool in catalog.model_tools()] == ["gateway_docs__add"]
    assert catalog.load([deferred]) == ["docs__add"]
    assert [tool["name"] for tool in catalog.model_tools()] == ["docs__add", "gateway_docs__add"]
    assert catalog.entry("docs__add").kind == "function"  # type: ignore[union-attr]


def test_a_choice_of_a_server_offers_only_its_tools_while_forced() -> None:
    catalog = Catalog([FUNCTION])
    tools = [McpTool("add", {"type": "object"}), McpTool("sub", {"type": "object"})]
    for label, offered in (("a", tools), ("b", tools), ("c", tools[:1])):
        server = McpBinding(McpServer(label, f"http://{label}.test"), None, False, Approval(False))
        for entry in mcp.entries(server, offered):
            catalog.add(entry)
    every = [t["name"] for t in catalog.model_tools()]
    choice = catalog.model_choice({"type": "mcp", "server_label": "b"})
    assert choice == "required"
    assert [t["name"] for t in catalog.model_tools(choice=choice)] == ["b__add", "b__sub"]
    assert [t["name"] for t in catalog.model_tools(choice="auto")] == every
    assert [t["name"] for t in catalog.model_tools(gateway=False, choice=choice)] == [
        FUNCTION["name"]
    ]
    alone = catalog.model_choice({"type": "mcp", "server_label": "c"})
    assert alone == {"type": "function", "name": "c__add"}


def test_only_a_forced_custom_tool_with_a_grammar_forces_one() -> None:
    catalog = Catalog([FUNCTION, APPLY_PATCH, {"type": "custom", "name": "free"}])
    assert (
        catalog.forced_grammar({"type": "function", "name": "apply_patch"}) == APPLY_PATCH["format"]
    )
    assert catalog.forced_grammar({"type": "function", "name": "free"}) is None
    assert catalog.forced_grammar({"type": "function", "name": "exec_command"}) is None
    assert catalog.forced_grammar({"type": "function", "name": "unknown"}) is None
    assert catalog.forced_grammar("required") is None


@pytest.mark.parametrize(
    ("tool", "description"),
    [
        ({"type": "custom", "name": "free"}, "The 'input' argument is free-form raw text."),
        (
            {"type": "custom", "name": "free", "description": "Free."},
            "Free.\n\nThe 'input' argument is free-form raw text.",
        ),
        (
            APPLY_PATCH,
            "Apply a patch.\n\nThe 'input' argument is raw text (not JSON) that must match this "
            "lark grammar:\nstart: /.+/",
        ),
    ],
)
def test_a_custom_tool_tells_the_model_what_its_input_is(
    tool: dict[str, Any], description: str
) -> None:
    [function] = model_tools([tool])
    assert function["description"] == description


def test_custom_input_of_arguments_that_are_not_an_object_is_the_raw_arguments() -> None:
    assert custom_input('["raw"]') == '["raw"]'


def test_a_restored_call_is_never_restored_again_as_another_member() -> None:
    inner = {"type": "namespace", "name": "a", "tools": [named("b")]}
    outer = {"type": "namespace", "name": "x", "tools": [named("a__b")]}
    catalog = Catalog([inner, outer])
    call = catalog.public_call({"type": "function_call", "name": "x__a__b"})
    assert call == {"type": "function_call", "name": "a__b", "namespace": "x"}
    assert catalog.public_call(dict(call)) == call


def test_flattened_names_strict_model_apis_refuse_are_respelled_apart() -> None:
    safe = re.compile(r"[A-Za-z0-9_-]{1,64}")
    assert model_name("read", "files") == "files__read"
    assert model_name("get weather") == "get weather", "a client's own name is its own"
    names = [
        model_name("files.read", "local"),
        model_name("files_read", "local"),  # safe as it is
        model_name("files read", "local"),
        model_name("x" * 70, "local"),
        model_name("y", "my server"),
    ]
    assert all(safe.fullmatch(name) for name in names), names
    assert len(set(names)) == len(names)
    assert names[0].startswith("local__files_read_")
    assert names[1] == "local__files_read"
    assert len(names[3]) == 64, "a respelling keeps as much of the name as fits"
    assert names[3].startswith("local__" + "x" * 48 + "_")
    assert model_name("files.read", "local") == names[0], "the same in every turn"
    dotted = {"type": "function", "name": "a.b"}
    catalog = Catalog([{"type": "namespace", "name": "ns", "tools": [dotted]}])
    [offered] = catalog.model_tools()
    call = {"type": "function_call", "name": offered["name"], "call_id": "c", "arguments": "{}"}
    catalog.public_call(call)
    assert (call["name"], call["namespace"]) == ("a.b", "ns")


def allowed(*tools: dict[str, Any], mode: str = "required") -> dict[str, Any]:
    return {"type": "allowed_tools", "mode": mode, "tools": list(tools)}


def offered(catalog: Catalog) -> list[str]:
    return [t["name"] for t in catalog.model_tools()]


@pytest.mark.parametrize(
    ("listed", "names"),
    [
        ([{"type": "function", "name": "exec_command"}], ["exec_command"]),
        ([{"type": "function", "name": "spawn"}], ["multi_agent_v1__spawn"]),
        (
            [{"type": "function", "name": "spawn", "namespace": "multi_agent_v1"}],
            ["multi_agent_v1__spawn"],
        ),
        ([{"type": "function", "name": "spawn", "namespace": "other"}], []),
        ([{"type": "namespace", "name": "multi_agent_v1"}], ["multi_agent_v1__spawn"]),
        ([{"type": "namespace", "name": "other"}], []),
        ([{"type": "custom", "name": "free"}], ["free"]),
        ([{"type": "function", "name": "free"}], []),  # a custom tool is not a function
        ([{"type": "mcp", "server_label": "b"}], ["b__add", "b__sub"]),
        ([{"type": "mcp", "server_label": "b", "name": "sub"}], ["b__sub"]),
        ([{"type": "web_search_preview"}], ["web_search"]),
        ([{"type": "function", "name": "nothing"}], []),
        ([], []),
    ],
)
def test_an_allowed_tools_choice_offers_only_the_tools_it_names(
    listed: list[dict[str, Any]], names: list[str]
) -> None:
    catalog = Catalog([FUNCTION, NAMESPACE, {"type": "custom", "name": "free"}])
    server = McpBinding(McpServer("b", "http://b.test"), None, False, Approval(False))
    for entry in mcp.entries(server, [McpTool("add", {}), McpTool("sub", {})]):
        catalog.add(entry)
    catalog.add(web_search.entry({"type": "web_search"}))
    assert "exec_command" in offered(catalog)

    assert catalog.model_choice(allowed(*listed)) == "required"
    assert offered(catalog) == names
    assert catalog.model_choice("auto") == "auto"  # a later round's choice
    assert offered(catalog) == names  # still narrowed: the set holds for the response


def test_tools_loaded_after_an_allowed_tools_choice_are_narrowed_too() -> None:
    catalog = Catalog([FUNCTION, {**named("late"), "defer_loading": True}], defer=True)
    catalog.model_choice(allowed({"type": "function", "name": "late"}, mode="auto"))
    assert offered(catalog) == []
    catalog.load([named("late")])
    assert offered(catalog) == ["late"]


@pytest.mark.parametrize(
    ("listed", "loaded"),
    [
        ({"type": "function", "name": "late"}, ["late"]),
        ({"type": "mcp", "server_label": "docs"}, ["docs__add", "docs__sub"]),
        ({"type": "mcp", "server_label": "docs", "name": "add"}, ["docs__add"]),
    ],
    ids=["function", "server", "server-tool"],
)
def test_an_allowed_tools_choice_naming_only_deferred_tools_offers_the_search_that_loads_them(
    listed: dict[str, Any], loaded: list[str]
) -> None:
    """Deferred tools are offered once a search loads them: a choice allowing only such
    tools would otherwise leave the model nothing to call (``required``: a round it
    cannot answer). The search is offered beside them while one is held back, and what
    it loads is still narrowed to what the choice names."""
    late = {"type": "function", "name": "late", "defer_loading": True}
    catalog = Catalog([FUNCTION, late], defer=True)
    deferred_server = McpBinding(
        McpServer("docs", "http://d.test"), None, False, Approval(False), deferred=True
    )
    for entry in mcp.entries(deferred_server, [McpTool("add", {}), McpTool("sub", {})], defer=True):
        catalog.add(entry)
    catalog.add(tool_search.entry({"type": "tool_search"}, catalog.deferred(), catalog.namespaces))

    catalog.model_choice(allowed(listed))

    assert offered(catalog) == ["tool_search"]
    catalog.load([late])
    catalog.load_mcp([{"type": "mcp", "server_label": "docs"}])
    assert offered(catalog) == loaded


def test_an_allowed_tools_choice_naming_offered_tools_leaves_the_search_out() -> None:
    late = {"type": "function", "name": "late", "defer_loading": True}
    catalog = Catalog([FUNCTION, late], defer=True)
    catalog.add(tool_search.entry({"type": "tool_search"}, catalog.deferred(), catalog.namespaces))

    catalog.model_choice(allowed({"type": "function", "name": "exec_command"}))

    assert offered(catalog) == ["exec_command"]
