from stateway.core.tools.catalog import Catalog, model_items, model_tools

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
