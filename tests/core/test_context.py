import pytest

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.commands import CreateResponse
from stateway.core.context import (
    Prior,
    build_context,
    checked_context,
    shown,
    unshown_types,
)
from stateway.core.errors import InvalidRequest, ResponseInProgress, UncarriedPart
from stateway.core.ports import ResponseRecord
from tests.core.fakes import MemoryStore, ScriptedBackend


def call(call_id: str) -> dict[str, str]:
    return {"type": "function_call", "call_id": call_id, "name": "f", "arguments": "{}"}


def output(call_id: str) -> dict[str, str]:
    return {"type": "function_call_output", "call_id": call_id, "output": "x"}


async def test_output_answering_a_call_in_the_same_input_is_accepted() -> None:
    items = [call("c1"), output("c1")]
    context = await build_context(
        MemoryStore(), "t", CreateResponse(model="m", input=items), ScriptedBackend([])
    )
    assert context == items


async def test_output_answering_a_stored_call_is_accepted() -> None:
    store = MemoryStore()
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, [], [call("c1")]))
    command = CreateResponse(model="m", input=[output("c1")], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert [i["type"] for i in context] == ["function_call", "function_call_output"]


async def test_a_call_cut_short_is_left_out_unless_answered() -> None:
    """A response cancelled (or out of tokens) while writing a call stores it
    ``incomplete``: continuing without answering it is allowed, and the model is not shown
    a call without its output; answered, it stays."""
    store = MemoryStore()
    cut = {**call("c1"), "arguments": "", "status": "incomplete"}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    await store.save(ResponseRecord("t", "resp_1", None, "cancelled", 0.0, {}, [user], [cut]))
    later = {**user, "content": [{"type": "input_text", "text": "go on"}]}
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert context == [user, later]
    command = CreateResponse(model="m", input=[output("c1")], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert context == [user, cut, output("c1")]
    complete = {**cut, "status": "completed"}
    await store.save(ResponseRecord("t", "resp_2", None, "completed", 0.0, {}, [user], [complete]))
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_2")
    with pytest.raises(InvalidRequest) as caught:
        await build_context(store, "t", command, ScriptedBackend([]))
    assert caught.value.code == "tool_output_missing"


async def test_a_call_cut_short_whose_id_a_later_call_took_is_left_out() -> None:
    """A chain stored by an upstream that numbered its calls per turn: a cut ``c1``,
    then a later answered ``c1``. The model is shown only the answered one, never two
    calls under one id (the cut one with its partial arguments)."""
    store = MemoryStore()
    cut = {**call("c1"), "arguments": '{"pa', "status": "incomplete"}
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    later = {**user, "content": [{"type": "input_text", "text": "go on"}]}
    stored = [user, cut, later, call("c1"), output("c1")]
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, stored, []))
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert context == [user, later, call("c1"), output("c1"), later]


async def test_a_call_cut_short_and_answered_stays_when_a_later_call_takes_its_id() -> None:
    """Answered, a cut call is a whole pair: a later call under its id (stored by an
    upstream that numbered calls per turn) leaves it, and its output, in place."""
    store = MemoryStore()
    cut = {**call("c1"), "arguments": "{}", "status": "incomplete"}
    stored = [cut, output("c1"), call("c1"), output("c1")]
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, stored, []))
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    command = CreateResponse(model="m", input=[user], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert context == [*stored, user]


@pytest.mark.parametrize(("call_id", "code"), [("", "invalid_value"), ("c1", "duplicate_call_id")])
async def test_an_empty_or_repeated_call_id_in_the_input_is_refused(
    call_id: str, code: str
) -> None:
    items = [call("c1"), output("c1"), call(call_id)]
    with pytest.raises(InvalidRequest) as caught:
        await build_context(
            MemoryStore(), "t", CreateResponse(model="m", input=items), ScriptedBackend([])
        )
    assert (caught.value.param, caught.value.code) == ("input[2].call_id", code)


async def test_an_earlier_output_whose_call_is_gone_is_left_out() -> None:
    """A conversation's call item deleted: its output answers nothing, and a model must
    never see an output without its call (Chat and Anthropic servers refuse it)."""
    store = MemoryStore()
    user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "q"}]}
    stored = [user, output("gone"), call("c2"), output("c2")]
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, stored, []))
    later = {**user, "content": [{"type": "input_text", "text": "go on"}]}
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_1")
    context = await build_context(store, "t", command, ScriptedBackend([]))
    assert context == [user, call("c2"), output("c2"), later]


async def test_output_without_a_call_is_rejected() -> None:
    with pytest.raises(InvalidRequest, match=r"^No tool call found") as caught:
        await build_context(
            MemoryStore(),
            "t",
            CreateResponse(model="m", input=[output("nope")]),
            ScriptedBackend([]),
        )
    assert (caught.value.param, caught.value.code) == ("input[0].call_id", "tool_call_not_found")


async def test_a_second_output_for_an_answered_call_is_named_a_duplicate() -> None:
    """Answered in the same input or earlier in the chain: the call is there, so "no tool
    call found" would send the client looking for the wrong mistake."""
    items = [call("c1"), output("c1"), output("c1")]
    with pytest.raises(
        InvalidRequest, match=r"^Duplicate function_call_output for call_id 'c1'"
    ) as caught:
        await build_context(
            MemoryStore(), "t", CreateResponse(model="m", input=items), ScriptedBackend([])
        )
    assert (caught.value.param, caught.value.code) == ("input[2].call_id", "tool_call_not_found")
    store = MemoryStore()
    stored = [call("c1"), output("c1")]
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, stored, []))
    command = CreateResponse(model="m", input=[output("c1")], previous_response_id="resp_1")
    with pytest.raises(InvalidRequest, match=r"^Duplicate function_call_output") as caught:
        await build_context(store, "t", command, ScriptedBackend([]))
    assert caught.value.param == "input[0].call_id"


async def test_item_types_the_upstream_cannot_carry_are_rejected_by_name() -> None:
    items = [{"type": "additional_tools", "tools": []}]
    with pytest.raises(InvalidRequest, match="additional_tools") as caught:
        await build_context(
            MemoryStore(), "t", CreateResponse(model="m", input=items), ScriptedBackend([])
        )
    assert caught.value.param == "input[0].type"


async def test_content_parts_the_upstream_cannot_carry_are_rejected_by_name() -> None:
    message = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_text", "text": "x"}, {"type": "input_file", "file_data": "x"}],
    }
    with pytest.raises(InvalidRequest, match="input_file") as caught:
        await build_context(
            MemoryStore(), "t", CreateResponse(model="m", input=[message]), ScriptedBackend([])
        )
    assert caught.value.param == "input[0].content[1].type"


CHAT = OpenAIChatBackend(UpstreamClient(UpstreamTarget("chat", "http://127.0.0.1:9/v1")))


@pytest.mark.parametrize(
    ("item", "param"),
    [
        (
            {
                "type": "message",
                "role": "system",
                "content": [
                    {"type": "input_text", "text": "x"},
                    {"type": "input_image", "image_url": "data:,"},
                ],
            },
            "input[0].content[1].type",
        ),
        (
            {
                "type": "function_call_output",
                "call_id": "c1",
                "output": [{"type": "input_file", "file_data": "data:,"}],
            },
            "input[1].output[0].type",
        ),
    ],
)
async def test_chat_upstreams_refuse_parts_they_would_drop(
    item: dict[str, object], param: str
) -> None:
    items = [call("c1"), item] if item["type"] == "function_call_output" else [item]
    with pytest.raises(InvalidRequest) as caught:
        await build_context(MemoryStore(), "t", CreateResponse(model="m", input=items), CHAT)
    assert caught.value.param == param
    assert caught.value.code == "unsupported_content_type"


async def test_a_stored_item_the_upstream_cannot_carry_is_named_with_its_code() -> None:
    """A chain's item: the error names the chain and the item (by id, when it has one),
    with the code a request's own item would get; deleting it is no remedy there."""
    store = MemoryStore()
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    named = {"type": "message", "role": "user", "content": [audio], "id": "msg_9"}
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, [named], []))
    offer = {"type": "additional_tools", "role": "developer", "tools": []}
    await store.save(ResponseRecord("t", "resp_2", None, "completed", 0.0, {}, [offer], []))
    later = {"type": "message", "role": "user", "content": "go on"}
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_1")
    with pytest.raises(InvalidRequest) as caught:
        await build_context(store, "t", command, CHAT)
    assert (caught.value.param, caught.value.code) == (
        "previous_response_id",
        "unsupported_content_type",
    )
    assert caught.value.message == (
        "The previous response holds content part type 'input_audio' in a 'user' message "
        "(item 'msg_9'), which the upstream API of backend 'chat' cannot carry."
    )
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_2")
    with pytest.raises(InvalidRequest) as caught:  # a type the gateway models, not carried
        await build_context(store, "t", command, ScriptedBackend([]))
    assert caught.value.code == "unsupported_item_type"
    assert caught.value.message == (
        "The previous response holds input item type 'additional_tools', which the upstream "
        "API of backend 'scripted' cannot carry."
    )


async def test_a_stored_item_of_a_type_the_gateway_does_not_model_is_kept_but_not_shown() -> None:
    """Over a Chat upstream, which has no place for it (an ``image_generation_call`` from a
    turn hosted OpenAI ran): the context holds it as stored, the model is not shown it,
    and its content is not checked (none of it is sent)."""
    store = MemoryStore()
    audio = {"type": "input_audio", "input_audio": {"data": "", "format": "wav"}}
    odd = {"type": "future_item", "id": "fi_1", "role": "user", "content": [audio]}
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, [odd], []))
    later = {"type": "message", "role": "user", "content": "go on"}
    command = CreateResponse(model="m", input=[later], previous_response_id="resp_1")
    context = await build_context(store, "t", command, CHAT)
    assert context == [odd, later]
    assert shown(context, CHAT) == [later]
    assert unshown_types(context, CHAT) == ["future_item"]
    assert unshown_types([later], CHAT) == []


@pytest.mark.parametrize(
    ("made", "kind"),
    [
        (call("c1"), "function call"),
        (
            {"type": "custom_tool_call", "call_id": "c1", "name": "f", "input": ""},
            "custom tool call",
        ),
    ],
)
def test_an_unanswered_call_is_named_by_its_kind(made: dict[str, str], kind: str) -> None:
    user = {"type": "message", "role": "user", "content": "q"}
    with pytest.raises(InvalidRequest) as caught:
        checked_context(Prior([]), [made, user])
    assert caught.value.message == f"No tool output found for {kind} c1."


TEXT_FILE = {"type": "input_file", "filename": "a.txt", "file_data": "data:text/plain;base64,aGk="}


async def test_a_chat_upstream_carries_a_text_file_as_its_text() -> None:
    """Given inline as text (:mod:`stateway.core.text_files`), in a message or a tool
    output, and in the prior items; a backend that does not inline them refuses it."""
    store = MemoryStore()
    held = {"type": "message", "role": "user", "content": [TEXT_FILE]}
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, [held], []))
    answer = {"type": "function_call_output", "call_id": "c1", "output": [TEXT_FILE]}
    items = [held, call("c1"), answer]
    command = CreateResponse(model="m", input=items, previous_response_id="resp_1")
    assert await build_context(store, "t", command, CHAT) == [held, *items]
    with pytest.raises(InvalidRequest, match="input_file"):
        await build_context(store, "t", command, ScriptedBackend([]))


@pytest.mark.parametrize(
    "file",
    [
        {"type": "input_file", "file_data": "data:application/pdf;base64,JVBERi0="},
        {"type": "input_file", "file_data": "data:text/plain;base64,/w=="},  # not UTF-8
        {"type": "input_file", "file_url": "https://x.test/a.txt"},
    ],
)
async def test_a_file_that_is_not_text_is_refused_as_before(file: dict[str, str]) -> None:
    message = {"type": "message", "role": "user", "content": [TEXT_FILE, file]}
    command = CreateResponse(model="m", input=[message])
    with pytest.raises(UncarriedPart) as caught:
        await build_context(MemoryStore(), "t", command, CHAT)
    assert (caught.value.param, caught.value.part_type) == (
        "input[0].content[1].type",
        "input_file",
    )
    assert caught.value.message == (
        "Content part type 'input_file' in a 'user' message is not supported by the upstream "
        "API of backend 'chat'; only a text file is (inline: a base64 data URL of a text "
        "media type, UTF-8)."
    )


async def test_prior_items_are_checked_against_the_backend_too() -> None:
    store = MemoryStore()
    file_message = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,AA"}],
    }
    await store.save(ResponseRecord("t", "resp_1", None, "completed", 0.0, {}, [file_message], []))
    command = CreateResponse(model="m", input=[], previous_response_id="resp_1")
    with pytest.raises(InvalidRequest, match="input_file") as caught:
        await build_context(store, "t", command, CHAT)
    assert caught.value.param == "previous_response_id"


@pytest.mark.parametrize("status", ["queued", "in_progress"])
async def test_continuing_a_response_not_finished_is_refused(status: str) -> None:
    store = MemoryStore()
    await store.save(ResponseRecord("t", "resp_1", None, status, 0.0, {}, [], []))
    command = CreateResponse(model="m", input=[], previous_response_id="resp_1")
    with pytest.raises(ResponseInProgress) as caught:
        await build_context(store, "t", command, ScriptedBackend([]))
    assert "resp_1" in caught.value.message
