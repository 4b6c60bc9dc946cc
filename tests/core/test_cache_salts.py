"""Each tenant's ``cache_salt`` in the core: on every upstream call a run makes (its
rounds, its compaction's summary), on ``/compact``'s, and spliced into a Chat Completions
body forwarded untouched to a backend that salts its cache; nothing without salts, and
not a byte more on the fast path to a backend that does not salt."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from pydantic import BaseModel, ConfigDict

from stateway.core.commands import CompactResponse, CreateResponse, ForwardChat
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.generations import HeldRelay
from stateway.core.inference import Delta, Finish, TextDelta, ToolCallDelta, UsageReport
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.tools.ports import McpTool
from stateway.core.tools.toolset import GatewayTools
from stateway.core.usage import Usage
from stateway.sealing import AesGcmSealer
from tests.core.fakes import FakeMcp, MemoryStore, RoundsBackend, ScriptedBackend
from tests.core.test_chat_forwarding import Forwarding

ANSWER: list[Delta] = [TextDelta("done"), UsageReport(Usage(5, 1)), Finish("stop")]
SUMMARY: list[Delta] = [TextDelta("the summary"), UsageReport(Usage(9, 2)), Finish("stop")]
ACME = Principal(tenant_id="acme")
GLOBEX = Principal(tenant_id="globex")


class Salts:
    def salt(self, tenant_id: str) -> str:
        return f"salt-of-{tenant_id}"


class Salting(Forwarding):
    cache_salted = True


def build(
    backend: Any,
    *,
    salts: Salts | None = None,
    models: dict[str, str] | None = None,
    tools: GatewayTools | None = None,
) -> Gateway:
    store = MemoryStore()
    sealer = AesGcmSealer(bytes(range(32)))
    entry = BackendEntry(backend, models or {}, catch_all=models is None)
    loop = Loop(store, sealer=sealer, tools=tools)
    return Gateway(store, Router([entry]), loop, RunRegistry(), sealer=sealer, salts=salts)


def user(text: str) -> dict[str, Any]:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


async def test_every_round_of_a_run_carries_its_tenants_salt() -> None:
    add = McpTool("add", {"type": "object"}, "Add", {"readOnlyHint": True})

    async def run_add(arguments: Any) -> str:
        return "5"

    mcp = FakeMcp({"calc": [add]}, {"add": run_add})
    tools = GatewayTools(mcp=mcp, url_allowed=lambda url: True)
    calc = {"type": "mcp", "server_label": "calc", "server_url": "http://calc.test/mcp"}
    calc["require_approval"] = "never"
    call = [ToolCallDelta(0, "c1", "calc__add", "{}"), Finish("tool_calls")]
    backend = RoundsBackend([call, ANSWER])
    gateway = build(backend, salts=Salts(), tools=tools)
    settings = GenerationSettings(tools=[calc])
    run = await gateway.execute(ACME, CreateResponse("m", [user("hi")], settings=settings))
    await run.wait()
    assert run.state.status == "completed"
    assert [r.cache_salt for r in backend.requests] == ["salt-of-acme", "salt-of-acme"]


async def test_tenants_runs_carry_their_own_salts() -> None:
    backend = RoundsBackend([ANSWER, ANSWER])
    gateway = build(backend, salts=Salts())
    for principal in (ACME, GLOBEX):
        run = await gateway.execute(principal, CreateResponse("m", [user("hi")], store=False))
        await run.wait()
    assert [r.cache_salt for r in backend.requests] == ["salt-of-acme", "salt-of-globex"]


async def test_without_salts_no_request_carries_one() -> None:
    backend = ScriptedBackend(ANSWER)
    run = await build(backend).execute(ACME, CreateResponse("m", [user("hi")], store=False))
    await run.wait()
    assert [r.cache_salt for r in backend.requests] == [None]


async def test_a_runs_compaction_summary_carries_the_salt() -> None:
    backend = RoundsBackend([SUMMARY, ANSWER])
    settings = GenerationSettings(
        context_management=[{"type": "compaction", "compact_threshold": 1}]
    )
    command = CreateResponse("m", [user("one two three")], settings=settings)
    run = await build(backend, salts=Salts()).execute(ACME, command)
    await run.wait()
    assert [item["type"] for item in run.state.output] == ["compaction", "message"]
    assert [r.cache_salt for r in backend.requests] == ["salt-of-acme", "salt-of-acme"]


async def test_compact_asks_for_its_summary_with_the_salt() -> None:
    backend = ScriptedBackend(SUMMARY)
    await build(backend, salts=Salts()).execute(GLOBEX, CompactResponse("m", [user("one")]))
    assert [r.cache_salt for r in backend.requests] == ["salt-of-globex"]


def forward(raw: bytes) -> ForwardChat:
    fields = orjson.loads(raw)

    async def translate() -> CreateResponse:
        raise AssertionError("forwarded, not translated")

    return ForwardChat(fields["model"], raw, fields, translate)


async def forwarded(backend: Forwarding, principal: Principal, raw: bytes, **kw: Any) -> bytes:
    relay = await build(backend, salts=Salts(), **kw).execute(principal, forward(raw))
    assert isinstance(relay, HeldRelay)
    await relay.aclose()
    return backend.forwarded[-1]


CLIENT_BODY = b'{ "model" : "m",\n  "messages": [{"role": "user", "content": "caf\\u00e9"}] }\n'


async def test_the_fast_path_splices_the_salt_in_last_leaving_the_clients_bytes() -> None:
    sent = await forwarded(Salting(), ACME, CLIENT_BODY)
    assert sent == (
        b'{ "model" : "m",\n  "messages": [{"role": "user", "content": "caf\\u00e9"}] '
        b',"cache_salt":"salt-of-acme"}\n'
    )
    assert json.loads(sent) == {**json.loads(CLIENT_BODY), "cache_salt": "salt-of-acme"}


async def test_the_fast_path_gives_each_tenant_its_salt() -> None:
    backend = Salting()
    for principal in (ACME, GLOBEX, ACME):
        await forwarded(backend, principal, CLIENT_BODY)
    assert [orjson.loads(body)["cache_salt"] for body in backend.forwarded] == [
        "salt-of-acme",
        "salt-of-globex",
        "salt-of-acme",
    ]


class Strict(BaseModel):
    """A server's request model (vLLM's are pydantic), parsing the JSON itself."""

    model_config = ConfigDict(extra="allow")
    model: str
    cache_salt: str | None = None


@pytest.mark.parametrize(
    "raw",
    [
        b'{"model": "m", "cache_salt": "mine", "messages": []}',
        b'{"cache_salt": "mine", "model": "m", "messages": []}',
        b'{"model": "m", "messages": [], "cache_salt": "mine"}',
        b'{"model": "m", "messages": [], "cache_\\u0073alt": "mine"}',  # an escaped name
        b'{"model": "m", "messages": [], "cache_salt": null}',
    ],
)
async def test_a_clients_own_cache_salt_is_replaced_not_repeated(raw: bytes) -> None:
    """No parser can take the client's: the name is in the body once, the gateway's value
    (however the client spelt it: the parsed fields tell)."""
    sent = await forwarded(Salting(), ACME, raw)
    assert sent.count(b"cache_salt") == 1
    assert b"mine" not in sent
    assert json.loads(sent)["cache_salt"] == "salt-of-acme"
    assert orjson.loads(sent)["cache_salt"] == "salt-of-acme"
    assert Strict.model_validate_json(sent).cache_salt == "salt-of-acme"
    fields = {k: v for k, v in json.loads(raw).items() if k != "cache_salt"}
    assert {k: v for k, v in json.loads(sent).items() if k != "cache_salt"} == fields


@pytest.mark.parametrize(
    ("raw", "sent"),
    [
        (b"{}", b'{"cache_salt":"s"}'),
        (b"{ }\r\n", b'{ "cache_salt":"s"}\r\n'),
        (b'{"model":"m"}\t \n', b'{"model":"m","cache_salt":"s"}\t \n'),
        (b'{"model":"m","stop":["}"]}', b'{"model":"m","stop":["}"],"cache_salt":"s"}'),
    ],
)
def test_the_splice_goes_before_the_objects_own_end(raw: bytes, sent: bytes) -> None:
    """The last ``}`` of a JSON object's text is its end: only blanks may follow it (an
    empty object takes no comma; a ``}`` in a string is not the end)."""
    fields = orjson.loads(raw)
    command = ForwardChat("m", raw, fields, forward(b'{"model":"m"}').translate)
    assert command.salted_body_for("m", "s") == sent
    assert json.loads(sent) == {**fields, "cache_salt": "s"}


async def test_a_renamed_model_and_the_salt_go_together() -> None:
    raw = b'{"model": "public", "messages": [], "top_k": 3}'
    sent = await forwarded(Salting(), ACME, raw, models={"public": "upstream"})
    assert orjson.loads(sent) == {
        "model": "upstream",
        "messages": [],
        "top_k": 3,
        "cache_salt": "salt-of-acme",
    }


async def test_a_backend_that_does_not_salt_gets_the_very_bytes() -> None:
    backend = Forwarding()
    sent = await forwarded(backend, ACME, CLIENT_BODY)
    assert sent is CLIENT_BODY  # not a copy: nothing was done to it


async def test_a_salted_backend_without_salts_gets_the_very_bytes() -> None:
    """A gateway built without the server key (in-memory tests) has no salts to give."""
    backend = Salting()
    relay = await build(backend).execute(ACME, forward(CLIENT_BODY))
    assert isinstance(relay, HeldRelay)
    await relay.aclose()
    assert backend.forwarded == [CLIENT_BODY]
