"""Input items standing for stored ones (:mod:`stateway.core.references`)."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.core.commands import CompactResponse, CountTokens, CreateResponse
from stateway.core.conversations.commands import AddConversationItems
from stateway.core.errors import NotFound
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.items import Item
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.reasoning import unwrapped, wrapped
from stateway.core.references import (
    has_references,
    resolve_references,
    resolved,
    resolved_items,
)
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.sealing import AesGcmSealer
from tests.core.fakes import MemoryStore, ScriptedBackend

THOUGHT: Item = {
    "id": "rs_1",
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "cloudy"}],
    "encrypted_content": "sig",
}


class Stored:
    def __init__(self, items: dict[str, Item]) -> None:
        self.items = items
        self.asked: list[list[str]] = []

    async def find_items(self, tenant_id: str, item_ids: list[str]) -> dict[str, Item]:
        self.asked.append(item_ids)
        return {i: self.items[i] for i in item_ids if i in self.items}


def bare(**fields: Any) -> Item:
    return {"id": "rs_1", "type": "reasoning", "summary": [], **fields}


async def resolve(store: Stored, items: list[Item]) -> list[Item]:
    return await resolve_references(store, "t", items)  # type: ignore[arg-type]


async def test_an_input_with_nothing_to_look_up_asks_the_store_nothing() -> None:
    store = Stored({"rs_1": THOUGHT})
    items: list[Item] = [dict(THOUGHT), {"type": "message", "role": "user", "content": "hi"}]
    assert not has_references(items)
    assert await resolve(store, items) == items
    assert store.asked == []


async def test_a_textless_reasoning_item_gets_the_stored_text_when_it_is_that_item() -> None:
    store = Stored({"rs_1": THOUGHT})
    [filled] = await resolve(store, [bare(encrypted_content="sig")])
    assert filled["content"] == THOUGHT["content"]
    [whole] = await resolve(store, [bare()])
    assert whole == THOUGHT
    summarized = {**THOUGHT, "summary": [{"type": "summary_text", "text": "cloud"}]}
    [filled] = await resolve(Stored({"rs_1": summarized}), [bare(encrypted_content="sig")])
    assert (filled["summary"], filled["content"]) == (summarized["summary"], THOUGHT["content"])
    for other in (bare(encrypted_content="another"), bare(id="rs_2", encrypted_content="sig")):
        assert await resolve(store, [other]) == [other]


async def test_a_textless_reasoning_item_is_not_filled_from_another_kind_of_item() -> None:
    message: Item = {"id": "rs_1", "type": "message", "role": "assistant", "content": []}
    assert await resolve(Stored({"rs_1": message}), [bare()]) == [bare()]


async def test_a_reasoning_item_with_its_text_but_no_seal_gets_the_stored_seal() -> None:
    """Pydantic AI's shape: the text as summary and content, ``encrypted_content: null``."""
    store = Stored({"rs_1": THOUGHT})
    said = [{"type": "summary_text", "text": "cloudy"}]
    for sent in (bare(summary=said, encrypted_content=None), bare(content=THOUGHT["content"])):
        [sealed] = await resolve(store, [sent])
        assert sealed == {**sent, "encrypted_content": "sig"}
    other = bare(summary=[{"type": "summary_text", "text": "sunny"}])
    unnamed = {**bare(content=THOUGHT["content"]), "id": None}
    for left in (other, bare(id="rs_2", content=THOUGHT["content"]), unnamed):
        assert await resolve(store, [left]) == [left]
    for seal in (None, ""):
        unsealed = Stored({"rs_1": {**THOUGHT, "encrypted_content": seal}})
        assert await resolve(unsealed, [bare(content=THOUGHT["content"])]) == [
            bare(content=THOUGHT["content"])
        ]


async def test_a_reasoning_item_is_matched_by_the_stored_summary_too() -> None:
    """Hosted OpenAI's reasoning holds its text as a summary only; a reasoning item sent
    back with an empty text is no stored item's."""
    summary = [{"type": "summary_text", "text": "cloudy"}]
    store = Stored({"rs_1": {**THOUGHT, "summary": summary, "content": []}})
    [sealed] = await resolve(store, [bare(summary=summary)])
    assert sealed["encrypted_content"] == "sig"
    empty = bare(summary=[{"type": "summary_text", "text": ""}])
    assert await resolve(Stored({"rs_1": THOUGHT}), [empty]) == [empty]


async def test_a_reference_to_nothing_stored_is_a_404_naming_it() -> None:
    items: list[Item] = [THOUGHT, {"type": "item_reference", "id": "msg_gone"}]
    with pytest.raises(NotFound) as caught:
        await resolve(Stored({}), items)
    assert caught.value.param == "input[1]"
    assert caught.value.message == (
        "Item with id 'msg_gone' not found. Items are not persisted when `store` is set to "
        "false. Try again with `store` set to true, or remove this item from your input."
    )


SEALER = AesGcmSealer(bytes(range(32)))


async def resolve_sealing(store: Stored, items: list[Item]) -> list[Item]:
    return await resolve_references(store, "t", items, sealer=SEALER)  # type: ignore[arg-type]


async def test_a_stored_upstream_seal_as_it_came_is_sealed_over_for_its_tenant() -> None:
    """Releases before seals were sealed over stored an upstream's as it came (``sig``,
    :data:`THOUGHT`'s). The item a reference or a textless item names is the tenant's
    own, as a chain's items are, so its seal is sealed over for it, as a create stores it
    now, and reaches the upstream (a request's own seal as it came is left out)."""
    over = {**THOUGHT, "encrypted_content": wrapped(SEALER, "t", "sig")}
    store = Stored({"rs_1": THOUGHT, "rs_2": over})
    for given in ({"type": "item_reference", "id": "rs_1"}, bare(), bare(encrypted_content="sig")):
        [item] = await resolve_sealing(store, [given])
        assert unwrapped(SEALER, "t", item["encrypted_content"]) == "sig"
        assert item["content"] == THOUGHT["content"]
    for kept in ({"type": "item_reference", "id": "rs_2"}, bare(id="rs_2")):
        assert await resolve_sealing(store, [kept]) == [over]
    unmatched = bare(encrypted_content="another")  # no stored item's: left to the view
    assert await resolve_sealing(store, [unmatched]) == [unmatched]
    assert store.items["rs_1"] == THOUGHT  # not changed in place


async def test_both_commands_seal_over_a_stored_upstream_seal_for_their_tenant() -> None:
    """A create's input and a conversation's added items resolve with the sealer given."""
    store: Any = Stored({"rs_1": THOUGHT})
    reference: Item = {"type": "item_reference", "id": "rs_1"}
    create = await resolved(store, "t", CreateResponse("m", [reference]), SEALER)
    added = await resolved_items(store, "t", AddConversationItems("c", [reference]), SEALER)
    for [item] in (create.input, added.items):
        assert unwrapped(SEALER, "t", item["encrypted_content"]) == "sig"


def said(text: str) -> Item:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def texts(items: list[Item]) -> list[str]:
    return [part["text"] for item in items for part in item.get("content", [])]


async def test_every_command_with_input_resolves_references_among_its_tenants_items() -> None:
    """A create, a count and a compaction each resolve an ``item_reference`` to the
    caller's stored item; another tenant's is a 404 naming the input item."""
    backend = ScriptedBackend([TextDelta("kept"), Finish("stop")])
    backend.token_count = 7
    store = MemoryStore()
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    sealer = AesGcmSealer(bytes(range(32)))
    gateway = Gateway(store, router, Loop(store), RunRegistry(), sealer=sealer)
    owner = Principal(tenant_id="a")
    first = await gateway.execute(owner, CreateResponse("m", [said("hi")]))
    await first.wait()
    [answer] = first.state.output
    reference: Item = {"type": "item_reference", "id": answer["id"]}

    def create() -> CreateResponse:
        return CreateResponse("m", [reference, said("next")])

    run = await gateway.execute(owner, create())
    await run.wait()
    assert texts(backend.requests[-1].items) == ["kept", "next"]
    assert texts(store.records["a", run.id].input_items) == ["kept", "next"]  # as stored
    await gateway.execute(owner, CountTokens(create()))
    assert texts(backend.counted[-1].items) == ["kept", "next"]
    await gateway.execute(owner, CompactResponse("m", [reference, said("next")]))
    assert texts(backend.requests[-1].items)[:2] == ["kept", "next"]  # the summary call's

    sent = len(backend.requests), len(backend.counted)
    stranger = Principal(tenant_id="b")
    for command in (
        create(),
        CountTokens(create()),
        CompactResponse("m", [reference, said("next")]),
    ):
        with pytest.raises(NotFound) as caught:
            await gateway.execute(stranger, command)
        assert (caught.value.status, caught.value.param) == (404, "input[0]")
    assert (len(backend.requests), len(backend.counted)) == sent


CALLED: Item = {
    "id": "mcp_1",
    "type": "mcp_call",
    "server_label": "local",
    "name": "add",
    "arguments": '{"a": 2, "b": 3}',
    "output": "5",
    "error": None,
    "status": "completed",
}
LISTED: Item = {
    "id": "mcpl_1",
    "type": "mcp_list_tools",
    "server_label": "local",
    "tools": [{"name": "add", "input_schema": {"type": "object"}}],
}
SEARCHED: Item = {
    "id": "ws_1",
    "type": "web_search_call",
    "status": "completed",
    "action": {
        "type": "search",
        "query": "weather",
        "sources": [{"type": "url", "url": "https://a.test", "title": "A", "snippet": "sun"}],
    },
}
TOOL_ITEMS = Stored({"mcp_1": CALLED, "mcpl_1": LISTED, "ws_1": SEARCHED})


async def test_an_mcp_call_sent_back_without_its_output_gets_the_stored_one() -> None:
    """Pydantic AI's shape (``output: null``), as hosted fills it in by the item's id; the
    arguments may come re-serialized."""
    store = Stored({"mcp_1": CALLED})
    trimmed = {**CALLED, "output": None, "error": None, "status": "completed"}
    for sent in (trimmed, {**trimmed, "arguments": '{"a":2,"b":3}'}):
        [filled] = await resolve(store, [sent])
        assert filled == {**sent, "output": "5", "error": None, "status": "completed"}
    absent = {key: value for key, value in trimmed.items() if key not in ("output", "error")}
    [filled] = await resolve(store, [absent])
    assert filled["output"] == "5"
    failed = {**CALLED, "output": None, "error": "down", "status": "failed"}
    assert await resolve(Stored({"mcp_1": failed}), [trimmed]) == [
        {**trimmed, "error": "down", "status": "failed"}
    ]


async def test_an_mcp_call_that_is_not_the_stored_one_goes_on_as_it_came() -> None:
    store = Stored({"mcp_1": CALLED, "mcp_2": {**CALLED, "type": "function_call"}})
    trimmed = {**CALLED, "output": None}
    for other in (
        {**trimmed, "server_label": "remote"},
        {**trimmed, "name": "echo"},
        {**trimmed, "arguments": '{"a": 2, "b": 4}'},
        {**trimmed, "arguments": "a=2, b=3"},  # no JSON: only the same text is the same
        {**trimmed, "id": "mcp_2"},
        {**trimmed, "id": "mcp_3"},
        {**trimmed, "output": None, "error": "down"},  # a failed call: nothing to fill
    ):
        assert await resolve(store, [other]) == [other]


async def test_an_mcp_listing_sent_back_without_its_tools_gets_the_stored_ones() -> None:
    for sent in ({**LISTED, "tools": []}, {k: v for k, v in LISTED.items() if k != "tools"}):
        assert await resolve(TOOL_ITEMS, [sent]) == [{**sent, "tools": LISTED["tools"]}]
    other = {**LISTED, "tools": [], "server_label": "remote"}
    assert await resolve(TOOL_ITEMS, [other]) == [other]
    mismatched = {**LISTED, "id": "mcp_1", "tools": []}  # names the call, not a listing
    assert await resolve(TOOL_ITEMS, [mismatched]) == [mismatched]
    unknown = {**LISTED, "id": "mcpl_2", "tools": []}
    assert await resolve(TOOL_ITEMS, [unknown]) == [unknown]


async def test_a_web_search_sent_back_without_its_sources_gets_the_stored_ones() -> None:
    sent = {**SEARCHED, "action": {"type": "search", "query": "weather"}}
    [filled] = await resolve(TOOL_ITEMS, [sent])
    assert filled == {**sent, "action": SEARCHED["action"]}
    both = {**SEARCHED, "action": {"type": "search", "query": "weather", "queries": ["weather"]}}
    with_queries = Stored({"ws_1": {**SEARCHED, "action": {**both["action"], "sources": []}}})
    [filled] = await resolve(with_queries, [both])
    assert filled["action"]["sources"] == []
    for other in (
        {**sent, "action": {"type": "search", "query": "rain"}},
        {**sent, "action": {"type": "search"}},  # no query to tell it is the same search
        {**sent, "id": "ws_2"},
        {**sent, "id": "mcp_1"},
    ):
        assert await resolve(TOOL_ITEMS, [other]) == [other]
    unkept = Stored({"ws_1": {**SEARCHED, "action": {"type": "search", "query": "weather"}}})
    assert await resolve(unkept, [sent]) == [sent]  # stored trimmed too: nothing to fill


async def test_tool_items_that_carry_what_is_stored_ask_the_store_nothing() -> None:
    store = Stored({"mcp_1": CALLED, "mcpl_1": LISTED, "ws_1": SEARCHED})
    whole = [dict(CALLED), dict(LISTED), dict(SEARCHED), {**CALLED, "output": None, "id": None}]
    assert not has_references(whole)
    assert await resolve(store, whole) == whole
    assert store.asked == []
    trimmed = [{**CALLED, "output": None}, {**LISTED, "tools": []}]
    assert has_references(trimmed)
    filled = await resolve(store, trimmed)
    assert filled == [CALLED, LISTED]
    assert store.asked == [["mcp_1", "mcpl_1"]]
    assert store.items["mcp_1"] == CALLED  # not changed in place
