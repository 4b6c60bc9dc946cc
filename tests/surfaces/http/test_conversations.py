"""The Conversations routes in process: paths, methods, bodies, and the error shape."""

from __future__ import annotations

import threading

import orjson
import pytest
from starlette.applications import Starlette

from stateway.core.conversations.commands import AddConversationItems
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.protocols.conversations import decode
from stateway.surfaces.http import conversations
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.responses import INLINE_DECODE_BYTES, ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend
from tests.surfaces.http.asgi import call, stalled


def build(max_body: int = 4096, body_timeout: float | None = None) -> Starlette:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    router = Router(
        [BackendEntry(ScriptedBackend([TextDelta("ok"), Finish("stop")]), {}, catch_all=True)]
    )
    gateway = Gateway(store, router, Loop(store), RunRegistry(), conversations=conversations)
    return build_http_app(
        ResponsesRoutes(gateway, max_body),
        ServiceRoutes(gateway),
        conversations=ConversationsRoutes(gateway, max_body, body_timeout=body_timeout),
    )


def dumps(value: object) -> bytes:
    return orjson.dumps(value)


async def test_every_route_answers_its_object() -> None:
    app = build()
    created = await call(app, "POST", "/v1/conversations", dumps({"metadata": {"a": "b"}}))
    assert created.status == 200
    conversation = created.json()
    assert set(conversation) == {"id", "object", "created_at", "metadata"}
    base = f"/v1/conversations/{conversation['id']}"

    assert (await call(app, "GET", base)).json() == conversation
    updated = await call(app, "POST", base, dumps({"metadata": {"c": "d"}}))
    assert updated.json() == {**conversation, "metadata": {"c": "d"}}

    added = await call(
        app,
        "POST",
        base + "/items",
        dumps({"items": [{"role": "user", "content": "hi"}]}),
        query="include[]=message.output_text.logprobs",
    )
    listing = added.json()
    assert set(listing) == {"object", "data", "first_id", "last_id", "has_more"}
    [item] = listing["data"]
    assert item["content"] == [{"type": "input_text", "text": "hi"}]
    assert (await call(app, "GET", base + "/items", query="order=asc")).json() == listing
    item_path = f"{base}/items/{item['id']}"
    assert (await call(app, "GET", item_path)).json() == item
    after_delete = await call(app, "DELETE", item_path)
    assert after_delete.json() == {**conversation, "metadata": {"c": "d"}}
    empty = (await call(app, "GET", base + "/items")).json()
    assert (empty["data"], empty["first_id"], empty["last_id"]) == ([], None, None)

    deleted = await call(app, "DELETE", base)
    assert deleted.json() == {
        "id": conversation["id"],
        "object": "conversation.deleted",
        "deleted": True,
    }


async def test_errors_have_the_openai_shape() -> None:
    app = build()
    conversation = (await call(app, "POST", "/v1/conversations", b"{}")).json()
    base = f"/v1/conversations/{conversation['id']}"
    for method, path, body, query, status in [
        ("POST", "/v1/conversations", b"{", "", 400),
        ("POST", "/v1/conversations", b"x" * 5000, "", 413),
        ("POST", "/v1/conversations", dumps({"items": "x"}), "", 400),
        ("GET", "/v1/conversations/conv_missing", b"", "", 404),
        ("POST", "/v1/conversations/conv_missing", dumps({"metadata": {}}), "", 404),
        ("POST", base, b"{}", "", 400),
        ("DELETE", "/v1/conversations/conv_missing", b"", "", 404),
        ("GET", base + "/items", b"", "limit=0", 400),
        ("GET", base + "/items", b"", "order=sideways", 400),
        ("POST", base + "/items", dumps({"items": [{"role": "x", "content": "y"}]}), "", 400),
        ("GET", base + "/items/msg_missing", b"", "", 404),
        ("DELETE", base + "/items/msg_missing", b"", "", 404),
        ("GET", "/v1/conversations", b"", "", 405),
        ("PUT", base, b"", "", 405),
        ("GET", base + "/nope", b"", "", 404),
    ]:
        reply = await call(app, method, path, body, query)
        assert reply.status == status, (method, path, reply.body)
        assert set(reply.json()["error"]) == {"message", "type", "param", "code"}
        assert reply.json()["error"]["code"] is not None, (method, path)


async def test_a_body_must_be_declared_json() -> None:
    reply = await call(build(), "POST", "/v1/conversations", b"{}", content_type="text/plain")
    assert reply.status == 415


async def test_a_responses_turn_echoes_its_conversation() -> None:
    app = build()
    conversation = (await call(app, "POST", "/v1/conversations", b"{}")).json()
    turn = {"model": "m", "input": "hi", "conversation": conversation["id"]}
    reply = await call(app, "POST", "/v1/responses", dumps(turn))
    assert reply.json()["conversation"] == {"id": conversation["id"]}
    plain = await call(app, "POST", "/v1/responses", dumps({"model": "m", "input": "hi"}))
    assert plain.json()["conversation"] is None


async def test_large_bodies_are_decoded_off_the_event_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    threads: list[int] = []

    def recording(conversation_id: str, raw: bytes, include: list[str]) -> AddConversationItems:
        threads.append(threading.get_ident())
        return decode.decode_add_items(conversation_id, raw, include)

    monkeypatch.setattr(conversations, "decode_add_items", recording)
    app = build(max_body=4 * INLINE_DECODE_BYTES)
    conversation = (await call(app, "POST", "/v1/conversations", b"{}")).json()
    path = f"/v1/conversations/{conversation['id']}/items"
    small = dumps({"items": [{"role": "user", "content": "hi"}]})
    text = "x" * (INLINE_DECODE_BYTES + 1)
    large = dumps({"items": [{"role": "user", "content": text}]})
    assert (await call(app, "POST", path, small)).status == 200
    reply = await call(app, "POST", path, large)
    assert reply.status == 200
    assert reply.json()["data"][0]["content"][0]["text"] == text
    assert threads[0] == threading.get_ident()
    assert threads[1] != threading.get_ident()


async def test_an_item_reference_is_added_as_the_item_it_names() -> None:
    """Kept as a reference, it named nothing once given the conversation's id, and every
    turn of the conversation was refused from then on."""
    app = build(max_body=1 << 16)
    stored = await call(app, "POST", "/v1/responses", dumps({"model": "m", "input": "hi"}))
    [message] = stored.json()["output"]
    reference = {"type": "item_reference", "id": message["id"]}
    created = await call(app, "POST", "/v1/conversations", dumps({"items": [reference]}))
    base = f"/v1/conversations/{created.json()['id']}"
    added = await call(app, "POST", base + "/items", dumps({"items": [reference]}))
    assert added.status == 200, added.body
    listed = (await call(app, "GET", base + "/items", query="order=asc")).json()["data"]
    assert [(i["type"], i["role"], i["content"]) for i in listed] == [
        ("message", "assistant", message["content"])
    ] * 2
    turn = {"model": "m", "conversation": created.json()["id"], "input": "more"}
    assert (await call(app, "POST", "/v1/responses", dumps(turn))).status == 200


async def test_an_item_reference_names_an_item_the_conversations_api_added() -> None:
    app = build(max_body=1 << 16)
    items = {"items": [{"role": "user", "content": "hi"}, {"role": "user", "content": "bye"}]}
    created = await call(app, "POST", "/v1/conversations", dumps(items))
    base = f"/v1/conversations/{created.json()['id']}"
    page = (await call(app, "GET", base + "/items", query="order=asc")).json()["data"]
    hi, bye = ({"type": "item_reference", "id": item["id"]} for item in page)

    answered = await call(app, "POST", "/v1/responses", dumps({"model": "m", "input": [hi]}))
    assert answered.status == 200, answered.body
    await call(app, "DELETE", f"{base}/items/{bye['id']}")
    refused = await call(app, "POST", "/v1/responses", dumps({"model": "m", "input": [bye]}))
    assert refused.status == 404, refused.body
    assert refused.json()["error"]["param"] == "input[0]"


@pytest.mark.parametrize("route", ["create", "add"])
async def test_an_item_reference_naming_nothing_is_a_404_and_adds_nothing(route: str) -> None:
    app = build()
    created = await call(app, "POST", "/v1/conversations", b"{}")
    base = f"/v1/conversations/{created.json()['id']}"
    items = [{"role": "user", "content": "hi"}, {"type": "item_reference", "id": "msg_none"}]
    path = "/v1/conversations" if route == "create" else base + "/items"
    reply = await call(app, "POST", path, dumps({"items": items}))
    assert reply.status == 404, reply.body
    assert reply.json()["error"]["param"] == "items[1]"
    assert (await call(app, "GET", base + "/items")).json()["data"] == []


async def test_item_reads_take_include_in_either_spelling_and_check_it() -> None:
    """``include[]=`` (the SDKs') and ``include=``, in that order, each value checked: an
    unknown one is refused naming its index."""
    app = build()
    conversation = (await call(app, "POST", "/v1/conversations", b"{}")).json()
    base = f"/v1/conversations/{conversation['id']}/items"
    added = await call(app, "POST", base, dumps({"items": [{"role": "user", "content": "hi"}]}))
    known = "message.output_text.logprobs"
    for method, path, body in [
        ("POST", base, dumps({"items": [{"role": "user", "content": "hi"}]})),
        ("GET", base, b""),
        ("GET", f"{base}/{added.json()['data'][0]['id']}", b""),
    ]:
        for query, param in [
            ("include[]=bogus", "include[0]"),
            ("include=bogus", "include[0]"),
            (f"include[]={known}&include=bogus", "include[1]"),
        ]:
            reply = await call(app, method, path, body, query)
            assert reply.status == 400, (method, path, query)
            assert reply.json()["error"]["param"] == param, (method, path, query)


@pytest.mark.parametrize("path", ["/v1/conversations", "/v1/conversations/conv_1"])
async def test_a_body_that_never_finishes_is_a_408(path: str) -> None:
    sent = await stalled(build(body_timeout=0.1), path, b'{"metadata": ')
    assert sent[0]["status"] == 408
