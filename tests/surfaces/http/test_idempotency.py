"""``Idempotency-Key`` over HTTP, in process: one run per key however many retries and
whenever they arrive, identical answers, streams replayed from the run's log, 409 for a
key reused with another request, and every REST write covered."""

from __future__ import annotations

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.types import Message

from stateway.coordination import MemoryCommandResults
from stateway.core.coordination import CommandResults
from stateway.core.errors import UpstreamUnavailable
from stateway.core.exactly_once import fingerprint
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, TextDelta
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.identity.key_cache import KeyCache
from stateway.identity.oidc import OidcVerifier
from stateway.identity.oidc_settings import OidcSettings
from stateway.protocols.responses.stream import encode_event_json
from stateway.surfaces.auth.authenticator import Authenticator
from stateway.surfaces.http.app import build_http_app
from stateway.surfaces.http.conversations import ConversationsRoutes
from stateway.surfaces.http.idempotency import request_digest
from stateway.surfaces.http.responses import ResponsesRoutes
from stateway.surfaces.http.service import ServiceRoutes
from tests.core.conversation_fakes import MemoryConversations, TurnStore
from tests.core.fakes import ScriptedBackend
from tests.core.test_exactly_once import UnreachableResults
from tests.identity.test_key_cache import Clock, Store
from tests.support.oidc_issuer import AUDIENCE, TENANT_CLAIM, OidcIssuer
from tests.surfaces.auth.test_authenticator import keyed as key_of
from tests.surfaces.http.asgi import Reply, call
from tests.surfaces.http.test_responses import events

CREATE = b'{"model": "m", "input": "hi"}'
STREAM = b'{"model": "m", "input": "hi", "stream": true}'


def build(
    backend: ScriptedBackend,
    results: CommandResults | None = None,
    authenticator: Authenticator | None = None,
    keepalive: float = 15.0,
) -> Starlette:
    conversations = MemoryConversations()
    store = TurnStore(conversations)
    router = Router([BackendEntry(backend, {}, catch_all=True)])
    gateway = Gateway(
        store,
        router,
        Loop(store),
        RunRegistry(),
        conversations=conversations,
        encoder=encode_event_json,
        results=MemoryCommandResults() if results is None else results,
    )
    return build_http_app(
        ResponsesRoutes(gateway, 4096, keepalive=keepalive),
        ServiceRoutes(gateway),
        conversations=ConversationsRoutes(gateway, 4096),
        authenticator=authenticator,
    )


def keyed(key: str) -> list[tuple[bytes, bytes]]:
    return [(b"idempotency-key", key.encode())]


async def post(app: Starlette, path: str, body: bytes, key: str | None = "k1") -> Reply:
    return await call(app, "POST", path, body, headers=None if key is None else keyed(key))


async def test_twenty_concurrent_retries_run_once_and_get_identical_answers() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)

    replies = [asyncio.create_task(post(app, "/v1/responses", CREATE)) for _ in range(20)]
    await backend.started.wait()
    gate.set()
    answers = await asyncio.gather(*replies)

    assert len(backend.requests) == 1
    assert {r.status for r in answers} == {200}
    assert len({r.body for r in answers}) == 1
    assert answers[0].json()["status"] == "completed"
    later = await post(app, "/v1/responses", CREATE)
    assert later.body == answers[0].body
    assert len(backend.requests) == 1


async def test_without_a_key_every_request_runs() -> None:
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    app = build(backend)
    first = await post(app, "/v1/responses", CREATE, key=None)
    second = await post(app, "/v1/responses", CREATE, key=None)
    assert first.json()["id"] != second.json()["id"]
    assert len(backend.requests) == 2


async def test_the_same_key_with_another_body_is_a_409_even_while_the_first_runs() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)
    first = asyncio.create_task(post(app, "/v1/responses", CREATE))
    await backend.started.wait()

    running = await post(app, "/v1/responses", b'{"model": "m", "input": "other"}')
    gate.set()
    await first
    done = await post(app, "/v1/responses", b'{"model": "m", "input": "other"}')

    for reply in (running, done):
        assert reply.status == 409
        error = reply.json()["error"]
        assert (error["code"], error["param"]) == ("idempotency_key_reused", "Idempotency-Key")
    assert len(backend.requests) == 1


async def test_the_same_key_on_another_route_is_a_409() -> None:
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    created = await post(app, "/v1/conversations", b"{}")
    assert created.status == 200
    reused = await post(app, "/v1/responses", CREATE)
    assert reused.status == 409


async def test_a_failed_attempt_is_not_remembered_and_its_retry_runs_again() -> None:
    backend = ScriptedBackend([UpstreamUnavailable("down")])
    app = build(backend)
    failed = await post(app, "/v1/responses", CREATE)
    assert failed.status == 502
    backend.script = [TextDelta("a"), Finish("stop")]
    retried = await post(app, "/v1/responses", CREATE)
    assert retried.status == 200
    assert retried.json()["status"] == "completed"
    assert len(backend.requests) == 2


async def test_a_stream_that_failed_before_its_output_is_not_remembered() -> None:
    """A keyed stream answered with its HTTP error (it failed before any output) is a
    failure, not an outcome: its retry runs again rather than replaying the failed
    response's log as a 200 stream."""
    backend = ScriptedBackend([UpstreamUnavailable("down")])
    app = build(backend)
    failed = await post(app, "/v1/responses", STREAM)
    assert (failed.status, failed.json()["error"]["code"]) == (502, "upstream_unavailable")

    backend.script = [TextDelta("a"), Finish("stop")]
    retried = await post(app, "/v1/responses", STREAM)

    assert retried.status == 200
    assert events(retried.body)[-1]["type"] == "response.completed"
    assert len(backend.requests) == 2


async def test_answers_whose_outcomes_cannot_be_stored_are_still_given() -> None:
    """Redis going away while keyed requests run: each answers as it ran (the response
    generated and stored, the upstream's error), not with a 503 whose retry would run a
    finished response again."""
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    app = build(backend, UnreachableResults())

    created = await post(app, "/v1/responses", CREATE)
    assert created.status == 200
    assert created.json()["status"] == "completed"
    streamed = await post(app, "/v1/responses", STREAM, key="k2")
    assert streamed.status == 200
    assert events(streamed.body)[-1]["type"] == "response.completed"
    backend.script = [UpstreamUnavailable("down")]
    failed = await post(app, "/v1/responses", CREATE, key="k3")
    assert (failed.status, failed.json()["error"]["code"]) == (502, "upstream_unavailable")


async def test_a_retried_stream_replays_the_same_response_from_its_log() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), TextDelta("b"), Finish("stop")], gate)
    app = build(backend)
    first = asyncio.create_task(post(app, "/v1/responses", STREAM))
    await backend.started.wait()
    joined = asyncio.create_task(post(app, "/v1/responses", STREAM))  # while it runs
    await asyncio.sleep(0)
    gate.set()
    original, during = await asyncio.gather(first, joined)
    after = await post(app, "/v1/responses", STREAM)  # once it ended (from the stored log)

    sent = events(original.body)
    assert sent[-1]["type"] == "response.completed"
    assert events(during.body) == sent
    assert events(after.body) == sent
    assert len(backend.requests) == 1


async def test_a_keyed_stream_is_not_cancelled_when_its_client_leaves() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)
    leave = asyncio.Event()
    leave.set()  # the client is gone as soon as the stream starts
    first = asyncio.create_task(
        call(app, "POST", "/v1/responses", STREAM, leave=leave, headers=keyed("k1"))
    )
    await backend.started.wait()
    gate.set()
    await first  # its stream may have begun before its client was seen gone

    retried = await post(app, "/v1/responses", STREAM)

    assert events(retried.body)[-1]["type"] == "response.completed"
    assert len(backend.requests) == 1


async def test_a_stream_that_was_not_stored_is_replayed_while_it_runs_then_is_gone() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)
    unstored = b'{"model": "m", "input": "hi", "stream": true, "store": false}'
    first = asyncio.create_task(post(app, "/v1/responses", unstored))
    await backend.started.wait()
    joined = asyncio.create_task(post(app, "/v1/responses", unstored))
    await asyncio.sleep(0)
    gate.set()
    original, during = await asyncio.gather(first, joined)
    assert events(during.body) == events(original.body)

    gone = await post(app, "/v1/responses", unstored)
    assert gone.status == 404
    assert len(backend.requests) == 1


async def test_background_retries_get_the_first_answer_byte_for_byte() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)
    body = b'{"model": "m", "input": "hi", "background": true}'
    first = await post(app, "/v1/responses", body)
    gate.set()
    again = await post(app, "/v1/responses", body)
    assert again.status == 200
    assert again.body == first.body
    assert first.json()["status"] in ("queued", "in_progress")


async def test_cancel_and_delete_with_a_key_answer_as_the_first_time() -> None:
    gate = asyncio.Event()
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")], gate)
    app = build(backend)
    created = await post(app, "/v1/responses", b'{"model":"m","input":"hi","background":true}')
    response_id = created.json()["id"]
    cancel = f"/v1/responses/{response_id}/cancel"
    cancelled = await call(app, "POST", cancel, headers=keyed("c1"))
    assert cancelled.json()["status"] == "cancelled"
    assert (await call(app, "POST", cancel, headers=keyed("c1"))).body == cancelled.body

    path = f"/v1/responses/{response_id}"
    deleted = await call(app, "DELETE", path, headers=keyed("d1"))
    assert deleted.status == 200
    again = await call(app, "DELETE", path, headers=keyed("d1"))
    assert (again.status, again.body) == (200, deleted.body)
    assert (await call(app, "DELETE", path)).status == 404  # without the key: it is gone


async def test_conversation_writes_with_a_key_run_once() -> None:
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    first = await post(app, "/v1/conversations", b'{"metadata": {"a": "1"}}', key="c")
    again = await post(app, "/v1/conversations", b'{"metadata": {"a": "1"}}', key="c")
    assert again.body == first.body
    conversation = f"/v1/conversations/{first.json()['id']}"

    item = b'{"items": [{"type": "message", "role": "user", "content": "x"}]}'
    added = await post(app, conversation + "/items", item, key="i")
    assert (await post(app, conversation + "/items", item, key="i")).body == added.body
    listed = (await call(app, "GET", conversation + "/items")).json()
    assert len(listed["data"]) == 1

    updated = await post(app, conversation, b'{"metadata": {"b": "2"}}', key="u")
    assert (await post(app, conversation, b'{"metadata": {"b": "2"}}', key="u")).body == (
        updated.body
    )
    item_id = added.json()["data"][0]["id"]
    dropped = await call(app, "DELETE", f"{conversation}/items/{item_id}", headers=keyed("x"))
    again = await call(app, "DELETE", f"{conversation}/items/{item_id}", headers=keyed("x"))
    assert (again.status, again.body) == (200, dropped.body)
    gone = await call(app, "DELETE", conversation, headers=keyed("y"))
    assert (await call(app, "DELETE", conversation, headers=keyed("y"))).body == gone.body


async def test_a_conversation_write_key_reused_with_another_body_is_refused() -> None:
    """Each keyed write's digest holds its body: another body under the key is a 409 that
    changes nothing, not the first body's answer replayed."""
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    first = await post(app, "/v1/conversations", b'{"metadata": {"a": "1"}}', key="c")
    conversation = f"/v1/conversations/{first.json()['id']}"
    item = b'{"items": [{"type": "message", "role": "user", "content": "%s"}]}'
    for path, body, other in [
        ("/v1/conversations", b'{"metadata": {"a": "1"}}', b'{"metadata": {"a": "2"}}'),
        (conversation, b'{"metadata": {"b": "1"}}', b'{"metadata": {"b": "2"}}'),
        (conversation + "/items", item % b"x", item % b"y"),
    ]:
        key = f"w{len(path)}"
        assert (await post(app, path, body, key=key)).status == 200
        refused = await post(app, path, other, key=key)
        assert refused.status == 409, (path, refused.body)
        assert refused.json()["error"]["param"] == "Idempotency-Key"
    assert (await call(app, "GET", conversation)).json()["metadata"] == {"b": "1"}
    assert len((await call(app, "GET", conversation + "/items")).json()["data"]) == 1


async def test_a_key_too_long_is_a_400() -> None:
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    reply = await post(app, "/v1/responses", CREATE, key="k" * 256)
    assert reply.status == 400
    assert reply.json()["error"]["param"] == "Idempotency-Key"


async def test_a_token_whose_sub_is_a_keys_id_gets_no_replay_of_the_keys_answer() -> None:
    """An issuer picks its tokens' ``sub``: one equal to an API key's id, in the key's
    tenant, is another caller, with ``Idempotency-Key``s of its own."""
    backend = ScriptedBackend([TextDelta("a"), Finish("stop")])
    store = Store()
    key, record = await key_of(store, tenant="acme")
    with OidcIssuer() as issuer:
        oidc = OidcVerifier(OidcSettings(issuer.url, AUDIENCE, TENANT_CLAIM))
        app = build(
            backend,
            authenticator=Authenticator(keys=KeyCache(store, 2.0, clock=Clock()), oidc=oidc),
        )
        token = issuer.token(org="acme", sub=record.id)

        by_key = await post_as(app, key)
        by_token = await post_as(app, token)
        again = await post_as(app, token)

    assert (by_key.status, by_token.status) == (200, 200)
    assert by_token.json()["id"] != by_key.json()["id"]
    assert again.body == by_token.body  # the token's own retry is replayed
    assert len(backend.requests) == 2


async def post_as(app: Starlette, credential: str) -> Reply:
    headers = [(b"authorization", f"Bearer {credential}".encode()), *keyed("k1")]
    return await call(app, "POST", "/v1/responses", CREATE, headers=headers)


async def test_a_replayed_answer_is_json_like_the_first() -> None:
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    first = await post(app, "/v1/conversations", b"{}", key="c")
    again = await post(app, "/v1/conversations", b"{}", key="c")
    assert again.body == first.body
    assert again.headers["content-type"] == first.headers["content-type"] == "application/json"


async def test_the_same_key_with_another_conversation_body_is_a_409() -> None:
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    first = await post(app, "/v1/conversations", b'{"metadata": {"a": "1"}}', key="c")
    assert first.status == 200
    reused = await post(app, "/v1/conversations", b'{"metadata": {"a": "2"}}', key="c")
    assert reused.status == 409
    error = reused.json()["error"]
    assert (error["code"], error["param"]) == ("idempotency_key_reused", "Idempotency-Key")


async def test_the_same_key_to_cancel_another_response_is_a_409() -> None:
    """Bodiless requests are told apart by their path: a retried cancel of one response is
    not the answer to a cancel of another."""
    gate = asyncio.Event()
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")], gate))
    background = b'{"model": "m", "input": "hi", "background": true}'
    one = (await post(app, "/v1/responses", background, key=None)).json()["id"]
    other = (await post(app, "/v1/responses", background, key=None)).json()["id"]
    cancelled = await call(app, "POST", f"/v1/responses/{one}/cancel", headers=keyed("c"))
    assert cancelled.json()["id"] == one
    reused = await call(app, "POST", f"/v1/responses/{other}/cancel", headers=keyed("c"))
    assert reused.status == 409
    gate.set()


async def test_the_same_key_with_another_include_on_an_append_is_a_409() -> None:
    """The query is part of the request: an append answered with one ``include`` is not
    the answer to an append asking for another."""
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    conversation = (await post(app, "/v1/conversations", b"{}", key=None)).json()["id"]
    path = f"/v1/conversations/{conversation}/items"
    body = b'{"items": [{"type": "message", "role": "user", "content": "hi"}]}'
    first = await call(app, "POST", path, body, headers=keyed("c"))
    assert first.status == 200
    again = await call(app, "POST", path, body, headers=keyed("c"))
    assert again.body == first.body
    include = "include[]=reasoning.encrypted_content"
    reused = await call(app, "POST", path, body, query=include, headers=keyed("c"))
    assert reused.status == 409
    error = reused.json()["error"]
    assert (error["code"], error["param"]) == ("idempotency_key_reused", "Idempotency-Key")
    listed = await call(app, "GET", path)
    assert len(listed.json()["data"]) == 1


def test_a_requests_digest_covers_its_method_path_query_and_body() -> None:
    def request(method: str, path: str) -> Request:
        return Request({"type": "http", "method": method, "path": path, "headers": []})

    def queried(query: bytes) -> Request:
        scope = {"type": "http", "method": "POST", "path": "/v1/conversations/c"}
        return Request({**scope, "query_string": query, "headers": []})

    digests = {
        request_digest(queried(b"include[]=message.output_text.logprobs"), b"{}"),
        request_digest(request("POST", "/v1/conversations/c"), b"{}"),
        request_digest(request("DELETE", "/v1/conversations/c"), b"{}"),
        request_digest(request("POST", "/v1/conversations/d"), b"{}"),
        request_digest(request("POST", "/v1/conversations/c"), b""),
    }
    assert len(digests) == 5
    assert request_digest(queried(b""), b"{}") == request_digest(
        request("POST", "/v1/conversations/c"), b"{}"
    ), "a request without a query digests as before queries counted"


async def test_the_same_key_with_the_query_in_another_order_is_a_replay() -> None:
    """A query is the pairs it names, not the order a client wrote them in: the retry of
    an append whose parameters come in another order (or spelled with ``%5B%5D``) gets
    the first answer, and the append is made once."""
    app = build(ScriptedBackend([TextDelta("a"), Finish("stop")]))
    conversation = (await post(app, "/v1/conversations", b"{}", key=None)).json()["id"]
    path = f"/v1/conversations/{conversation}/items"
    body = b'{"items": [{"type": "message", "role": "user", "content": "hi"}]}'
    query = "include[]=reasoning.encrypted_content&include=message.output_text.logprobs"
    first = await call(app, "POST", path, body, query=query, headers=keyed("q"))
    assert first.status == 200
    reordered = "include=message.output_text.logprobs&include%5B%5D=reasoning.encrypted_content"
    again = await call(app, "POST", path, body, query=reordered, headers=keyed("q"))
    assert (again.status, again.body) == (200, first.body)
    listed = await call(app, "GET", path)
    assert len(listed.json()["data"]) == 1


def test_a_queries_digest_is_its_parameters_in_key_order() -> None:
    """Keys are sorted, a repeated key's values keep their order, and a value is never
    confused with the pairs it might spell."""

    def digest(query: bytes) -> str:
        scope = {"type": "http", "method": "POST", "path": "/v1/conversations/c/items"}
        return request_digest(Request({**scope, "query_string": query, "headers": []}), b"{}")

    assert digest(b"a=1&b=2") == digest(b"b=2&a=1")
    assert digest(b"a=x+y&b=%5B%5D") == digest(b"b=[]&a=x%20y")
    assert digest(b"a=1&b=2&a=3") == digest(b"b=2&a=1&a=3")
    different = [b"a=1&b=2", b"a=1&b=3", b"a=3&b=2&a=1", b"a=1&b=2&a=3", b"a=1%26b%3D2"]
    different += [b"a=1", b"a=1&a=1", b"a=&b=2", b"b=1&a=2", b"a%3D1=&b=2"]
    assert len({digest(query) for query in different}) == len(different)


def test_a_query_sent_in_key_order_digests_as_before_it_was_sorted() -> None:
    """An answer remembered before queries were put in order still answers its retry
    when the client (the OpenAI SDK, whose parameters come in order) sent them so."""
    path, body = b"/v1/conversations/c/items", b"{}"
    query = b"include%5B%5D=message.output_text.logprobs&include%5B%5D=reasoning.encrypted_content"
    scope = {"type": "http", "method": "POST", "path": path.decode(), "headers": []}
    request = Request({**scope, "query_string": query})
    assert request_digest(request, body) == fingerprint(b"POST", path, body, query)


async def test_a_keyed_streams_status_line_is_held_no_longer_than_the_interval() -> None:
    """A stream sent with an ``Idempotency-Key`` holds its status line while its upstream
    is silent as any stream does: for the keep-alive interval, then it goes out."""
    gate = asyncio.Event()

    def watch(message: Message) -> None:
        if message["type"] == "http.response.start":
            gate.set()

    app = build(ScriptedBackend([], gate=gate), keepalive=0.05)
    reply = await asyncio.wait_for(
        call(app, "POST", "/v1/responses", STREAM, headers=keyed("k1"), watch=watch), timeout=10
    )
    assert reply.status == 200
    assert events(reply.body)[-1]["type"] == "response.completed"
