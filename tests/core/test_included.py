"""A stored response's output as a read's ``include`` shows it."""

from __future__ import annotations

import copy

from stateway.core.commands import CreateResponse, GetResponse, ListInputItems
from stateway.core.compaction import sealed
from stateway.core.conversations.commands import (
    AddConversationItems,
    CreateConversation,
    GetConversationItem,
    ListConversationItems,
)
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.included import included
from stateway.core.inference import Finish, ReasoningDelta, TextDelta
from stateway.core.items import Item
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.reasoning import SEALED_BY_RESPONSES, wrapped
from stateway.core.response import ResponseState
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.sealing.aesgcm import AesGcmSealer
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend

SEALER = AesGcmSealer(bytes(range(32)))
ENCRYPTED = "reasoning.encrypted_content"
LOGPROBS = "message.output_text.logprobs"
TOKEN = {"token": "hi", "bytes": [104, 105], "logprob": -0.1, "top_logprobs": []}


def reasoning(text: str, seal: str | None = None) -> Item:
    item: Item = {
        "id": f"rs_{text}",
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
    }
    if seal is not None:
        item["encrypted_content"] = seal
    return item


def message() -> Item:
    part = {"type": "output_text", "text": "hi", "annotations": [], "logprobs": [TOKEN]}
    return {"id": "msg_1", "type": "message", "role": "assistant", "content": [part]}


def state(*output: Item) -> ResponseState:
    return ResponseState(
        "resp_1", "t1", 0.0, "m", None, None, True, GenerationSettings(), output=list(output)
    )


def test_without_the_includes_the_gateway_seal_and_the_tokens_are_left_out() -> None:
    ours = reasoning("mine", sealed.seal(SEALER, sealed.REASONING, "t1", "mine"))
    theirs = reasoning("signed", "c2lnbmF0dXJl")
    hidden = reasoning("", SEALED_BY_RESPONSES + "blob")
    over = reasoning("signed", wrapped(SEALER, "t1", "c2lnbmF0dXJl"))
    redacted = reasoning("", wrapped(SEALER, "t1", "redacted_thinking:data"))
    stored = state(ours, theirs, hidden, over, redacted, message())
    before = copy.deepcopy(stored.output)
    shown = included(stored, (), SEALER).output
    assert "encrypted_content" not in shown[0]
    # an upstream's own seal stays, as on create, sealed over or (stored before) not
    assert shown[1:5] == [theirs, hidden, over, redacted]
    assert shown[5]["content"][0]["logprobs"] == []
    assert stored.output == before  # nothing changed in place


def test_with_the_includes_an_unsealed_item_is_sealed_for_its_tenant() -> None:
    stored = state(reasoning("later"), message())
    shown = included(stored, (ENCRYPTED, LOGPROBS), SEALER).output
    seal = shown[0]["encrypted_content"]
    assert sealed.unseal(SEALER, sealed.REASONING, "t1", seal, "p") == "later"
    assert shown[1] == message()
    assert "encrypted_content" not in stored.output[0]


def test_none_is_the_output_as_stored() -> None:
    stored = state(reasoning("x", sealed.seal(SEALER, sealed.REASONING, "t1", "x")), message())
    assert included(stored, None, SEALER) is stored


async def test_every_read_of_stored_items_shows_them_as_its_include_asks() -> None:
    """A response's output, its input items and a conversation's items (listed, read one
    by one, answered to their adding), each read through the gateway with and without
    the include: sealed for the reader's tenant, or as a create without it shows them."""
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    backend = ScriptedBackend([ReasoningDelta("why"), TextDelta("so"), Finish("stop")])
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(
        store, router, Loop(store), RunRegistry(), conversations=conversations, sealer=SEALER
    )
    reader = Principal(tenant_id="t1")

    def opened(item: Item) -> str:
        return str(sealed.unseal(SEALER, sealed.REASONING, "t1", item["encrypted_content"], "p"))

    run = await gateway.execute(reader, CreateResponse("m", [reasoning("asked")]))
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["reasoning", "message"]
    shown = await gateway.execute(reader, GetResponse(run.id, include=(ENCRYPTED,)))
    assert opened(shown.output[0]) == "why"
    plain = await gateway.execute(reader, GetResponse(run.id, include=()))
    assert "encrypted_content" not in plain.output[0]
    page = await gateway.execute(reader, ListInputItems(run.id, include=(ENCRYPTED,)))
    assert [opened(item) for item in page.items] == ["asked"]

    conversation = await gateway.execute(reader, CreateConversation([reasoning("kept")]))
    listed = await gateway.execute(
        reader, ListConversationItems(conversation.id, include=(ENCRYPTED,))
    )
    assert [opened(item) for item in listed.items] == ["kept"]
    kept = listed.items[0]["id"]
    one = await gateway.execute(
        reader, GetConversationItem(conversation.id, kept, include=(ENCRYPTED,))
    )
    assert opened(one) == "kept"
    added = await gateway.execute(
        reader, AddConversationItems(conversation.id, [reasoning("more")], include=(ENCRYPTED,))
    )
    assert [opened(item) for item in added.items] == ["more"]
