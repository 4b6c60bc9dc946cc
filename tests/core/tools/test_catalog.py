from stateway.core.tools.catalog import (
    Catalog,
    custom_input,
    model_tools,
    with_context_tools,
)
from stateway.core.tools.history import model_items

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
    assert function["name"] == "apply_patch"
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


def test_an_earlier_turns_additional_tools_count_unless_declared_again() -> None:
    extra = {
        "type": "additional_tools",
        "role": "developer",
        "tools": [NAMESPACE, {"type": "web_search", "external_web_access": False}],
    }
    assert with_context_tools([FUNCTION], [extra]) == [FUNCTION, NAMESPACE]
    assert with_context_tools([NAMESPACE], [extra]) == [NAMESPACE]
    assert with_context_tools([FUNCTION], []) == [FUNCTION]
