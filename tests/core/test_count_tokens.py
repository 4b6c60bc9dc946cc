"""``CountTokens``: counted by the upstream when it can, else estimated; checked like a run."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from stateway.core.commands import CountTokens, CreateResponse
from stateway.core.errors import InvalidRequest, ModelNotFound, NotFound
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Finish, InferenceRequest
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.token_estimate import (
    IMAGE_TOKENS,
    LOW_DETAIL_IMAGE_TOKENS,
    PDF_PAGE_TOKENS,
    estimate_context,
    estimate_tokens,
    item_tokens,
)
from stateway.core.tools.model_names import model_name
from stateway.core.tools.toolset import GatewayTools
from tests.core.fakes import FakeSearch, MemoryStore, ScriptedBackend
from tests.core.tools.test_tool_loop import ADD, BOOM, MCP_TOOL, SLOW, Setup, answer

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 400}]}
TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}


class Counting(ScriptedBackend):
    async def count_tokens(self, request: InferenceRequest) -> int:
        self.requests.append(request)
        return 7


def gateway(backend: ScriptedBackend, models: dict[str, str] | None = None) -> Gateway:
    store = MemoryStore()
    router = Router([BackendEntry(backend, models or {}, catch_all=models is None)])
    return Gateway(store, router, Loop(store), RunRegistry())


def command(model: str = "m", **settings: object) -> CountTokens:
    generation = GenerationSettings(tools=[TOOL], **settings)  # type: ignore[arg-type]
    return CountTokens(CreateResponse(model=model, input=[USER], store=False, settings=generation))


async def test_an_upstream_that_counts_is_asked() -> None:
    backend = Counting([Finish("stop")])
    counted = await gateway(backend, {"m": "upstream-m"}).execute(Principal(), command())
    assert (counted.input_tokens, counted.estimated) == (7, False)
    [request] = backend.requests
    assert request.model == "upstream-m"
    assert request.tools == [TOOL]
    assert not backend.started.is_set()  # nothing ran


async def test_the_upstream_is_asked_what_a_run_would_send() -> None:
    backend = Counting([Finish("stop")])
    backend.carries_unknown_types = True  # speaks Responses: the image tool goes as declared
    image = {"type": "image_generation"}
    generation = GenerationSettings(tools=[TOOL, image], tool_choice="required", temperature=0.5)
    count = CountTokens(CreateResponse(model="m", input=[USER], store=False, settings=generation))
    await gateway(backend).execute(Principal(), count)
    [request] = backend.requests
    assert request.settings.temperature == 0.5
    assert (request.stream, request.tool_choice) == (False, "required")
    assert (request.tools, request.native_tools) == ([TOOL], [image])


async def test_a_conversation_where_none_are_served_is_a_404_naming_it() -> None:
    count = CountTokens(CreateResponse(model="m", input=[USER], conversation_id="conv_1"))
    with pytest.raises(NotFound) as caught:
        await gateway(ScriptedBackend([])).execute(Principal(), count)
    assert (caught.value.status, caught.value.param) == (404, "conversation")


async def test_the_others_are_estimated() -> None:
    counted = await gateway(ScriptedBackend([])).execute(Principal(), command())
    assert counted.estimated is True
    assert 100 <= counted.input_tokens <= 150


async def test_counting_checks_the_request_like_a_run() -> None:
    with pytest.raises(ModelNotFound):
        await gateway(ScriptedBackend([]), {"m": "m"}).execute(Principal(), command("other"))
    stray = {"type": "function_call_output", "call_id": "c9", "output": "x"}
    bad = CountTokens(CreateResponse(model="m", input=[USER, stray], store=False))
    with pytest.raises(InvalidRequest):
        await gateway(ScriptedBackend([])).execute(Principal(), bad)


def test_the_estimate_is_about_four_bytes_a_token() -> None:
    request = InferenceRequest("m", "i" * 40, [], GenerationSettings(), stream=False)
    assert estimate_tokens(request) == 11  # 40 bytes of instructions + "[]" twice
    empty = InferenceRequest("m", None, [], GenerationSettings(), stream=False)
    assert estimate_tokens(empty) == 1


def test_an_image_counts_as_an_image_not_as_its_bytes() -> None:
    data = "data:image/png;base64," + "A" * 400_000  # a 300 KB screenshot
    image = {"type": "input_image", "image_url": data, "detail": "auto"}
    text = {"type": "input_text", "text": "what is this"}
    seen = {"type": "message", "role": "user", "content": [image, text]}
    read = {"type": "function_call_output", "call_id": "c1", "output": [image]}
    plain = {"type": "message", "role": "user", "content": [text]}
    bare = estimate_context(None, [plain], [])
    assert estimate_context(None, [seen], []) <= bare + IMAGE_TOKENS + 10
    assert estimate_context(None, [seen, read], []) <= bare + 2 * IMAGE_TOKENS + 20
    assert image["image_url"] == data  # the item itself is left as it was
    url = {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    linked = {"type": "message", "role": "user", "content": [url, text]}
    assert estimate_context(None, [linked], []) >= bare + IMAGE_TOKENS


def test_a_computer_call_outputs_screenshot_counts_as_an_image() -> None:
    data = "data:image/png;base64," + "A" * 400_000
    plain = {"type": "computer_call_output", "call_id": "c1", "output": {}}
    bare = estimate_context(None, [plain], [])
    for kind in ("computer_screenshot", "input_image"):  # a dict, not a list of parts
        shot = {"type": kind, "image_url": data}
        seen = {"type": "computer_call_output", "call_id": "c1", "output": shot}
        assert bare + IMAGE_TOKENS <= estimate_context(None, [seen], []) <= bare + IMAGE_TOKENS + 10
        assert item_tokens(seen) <= item_tokens(plain) + IMAGE_TOKENS + 10
        assert shot["image_url"] == data  # the item itself is left as it was


def test_a_low_detail_image_counts_what_openai_counts_for_one() -> None:
    data = "data:image/png;base64," + "A" * 400_000
    text = {"type": "input_text", "text": "what is this"}
    plain = {"type": "message", "role": "user", "content": [text]}
    bare = estimate_context(None, [plain], [])
    for detail, tokens in (("low", LOW_DETAIL_IMAGE_TOKENS), ("high", IMAGE_TOKENS)):
        image = {"type": "input_image", "image_url": data, "detail": detail}
        seen = {"type": "message", "role": "user", "content": [image, text]}
        assert bare + tokens <= estimate_context(None, [seen], []) <= bare + tokens + 10
        shot = {"type": "computer_call_output", "call_id": "c", "output": image}
        assert item_tokens(shot) <= tokens + 20
    assert LOW_DETAIL_IMAGE_TOKENS == 85


def _file(media_type: str, data: bytes) -> dict[str, object]:
    encoded = base64.b64encode(data).decode()
    return {"type": "input_file", "file_data": f"data:{media_type};base64,{encoded}"}


def test_a_pdf_counts_by_its_pages_not_by_its_base64() -> None:
    page = b"1 0 obj << /Type /Page /Parent 2 0 R >> endobj\nstream " + b"\x9c" * 100_000
    pdf = b"%PDF-1.7\n<< /Type /Pages /Count 3 >>\n" + page * 3  # 300 KB, three pages
    text = {"type": "input_text", "text": "read it"}
    plain = {"type": "message", "role": "user", "content": [text]}
    read = {"type": "message", "role": "user", "content": [text, _file("application/pdf", pdf)]}
    bare = estimate_context(None, [plain], [])
    assert bare + 3 * PDF_PAGE_TOKENS <= estimate_context(None, [read], [])
    assert estimate_context(None, [read], []) <= bare + 3 * PDF_PAGE_TOKENS + 20
    assert item_tokens(read) <= item_tokens(plain) + 3 * PDF_PAGE_TOKENS + 20


def test_a_text_file_counts_its_text_not_its_base64() -> None:
    text = {"type": "input_text", "text": "read it"}
    plain = {"type": "message", "role": "user", "content": [text]}
    document = _file("text/plain", b"w" * 40_000)
    read = {"type": "message", "role": "user", "content": [text, document]}
    bare = estimate_context(None, [plain], [])
    assert bare + 10_000 <= estimate_context(None, [read], []) <= bare + 10_020


# -- the gateway's tools, counted as a run offers them ------------------------------------

SEARCH = {"type": "web_search"}
MINE = {"type": "function", "name": "web_search", "parameters": {"type": "object"}}


async def counted_request(setup: Setup, tools: list[Any], **fields: Any) -> InferenceRequest:
    """What a count of ``tools`` asks the backend (or estimates) with."""
    settings = GenerationSettings(tools=tools, **fields.pop("settings", {}))
    count = CountTokens(CreateResponse("m", [USER], settings=settings, **fields))
    await setup.gateway.execute(Principal(), count)
    return setup.backend.counted[-1]


def names(request: InferenceRequest) -> list[str]:
    return [tool["name"] for tool in request.tools]


async def test_the_gateways_web_search_is_counted_under_the_name_a_run_offers_it_by() -> None:
    setup = Setup([answer()], search=FakeSearch([]))
    assert names(await counted_request(setup, [SEARCH])) == ["web_search"]
    beside = await counted_request(setup, [SEARCH, MINE])
    assert names(beside) == ["web_search", "gateway_web_search"]
    assert beside.names.of("web_search") == "gateway_web_search"


async def test_the_gateways_tool_search_is_counted_and_what_it_defers_is_not() -> None:
    setup = Setup([answer()])
    weather = {"type": "function", "name": "get_weather", "defer_loading": True}
    assert names(await counted_request(setup, [TOOL, weather, {"type": "tool_search"}])) == [
        "f",
        "tool_search",
    ]


async def test_mcp_tools_are_counted_as_the_chains_listing_shows_them_and_never_listed() -> None:
    """A count asks no MCP server: a first turn's servers are not counted (a run would list
    them first); a later turn's are, as the listing it would reuse shows them."""
    setup = Setup([answer()])
    assert names(await counted_request(setup, [TOOL, MCP_TOOL])) == ["f"]
    assert setup.mcp.listed == []
    first = await setup.create([MCP_TOOL])
    listings = len(setup.mcp.listed)
    later = await counted_request(setup, [TOOL, MCP_TOOL], previous_response_id=first.id)
    assert names(later) == ["f", *(model_name(t.name, "docs") for t in (ADD, SLOW, BOOM))]
    assert len(setup.mcp.listed) == listings
    allowed = {**MCP_TOOL, "allowed_tools": ["add"]}
    narrower = await counted_request(setup, [allowed], previous_response_id=first.id)
    assert names(narrower) == ["docs__add"]


async def test_a_deferred_servers_tools_are_counted_once_a_search_in_the_chain_loaded_them() -> (
    None
):
    """As a run offers them: held back behind the tool search, but for those a search of
    the chain loaded; the search's description, which names the server, is counted."""
    setup = Setup([answer()])
    tools = [{**MCP_TOOL, "defer_loading": True}, {"type": "tool_search"}]
    first = await setup.create(tools)
    later = await counted_request(setup, tools, previous_response_id=first.id)
    assert names(later) == ["tool_search"]
    assert "- docs (the tools of an MCP server)" in later.tools[0]["description"]
    loaded = {"type": "mcp", "server_label": "docs", "allowed_tools": ["slow"]}
    call = {"type": "tool_search_call", "call_id": "c", "execution": "client", "arguments": {}}
    output = {"type": "tool_search_output", "call_id": "c", "execution": "client"}
    resent = [call, {**output, "tools": [loaded]}]
    client = [tools[0], {"type": "tool_search", "execution": "client"}]
    settings = GenerationSettings(tools=client)
    count = CreateResponse("m", resent, settings=settings, previous_response_id=first.id)
    await setup.gateway.execute(Principal(), CountTokens(count))
    assert names(setup.backend.counted[-1]) == ["tool_search", "docs__slow"]


async def test_an_allowed_tools_choice_narrows_what_is_counted_as_it_narrows_a_run() -> None:
    setup = Setup([answer()])
    other = {"type": "function", "name": "g", "parameters": {"type": "object"}}
    choice = {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "g"}]}
    request = await counted_request(setup, [TOOL, other], settings={"tool_choice": choice})
    assert (names(request), request.tool_choice) == (["g"], "auto")


async def test_a_count_with_hidden_rounds_takes_the_routes_gateway_tools() -> None:
    """A Chat or Messages count (``hidden_rounds``) is sent the backend's ``gateway_tools``
    as a run of it is."""
    store = MemoryStore()
    backend = ScriptedBackend([Finish("stop")])
    tools = GatewayTools(search=FakeSearch([]))
    offered = tools.resolve([SEARCH], trusted=True)
    entry = BackendEntry(backend, {}, catch_all=True, gateway_tools=offered)
    gateway = Gateway(store, Router([entry]), Loop(store, tools=tools), RunRegistry())
    count = CountTokens(CreateResponse("m", [USER], store=False, hidden_rounds=True))
    await gateway.execute(Principal(), count)
    assert names(backend.counted[-1]) == ["web_search"]


async def test_the_tools_an_earlier_search_loaded_are_counted() -> None:
    setup = Setup([answer()])
    searched = {"type": "tool_search_call", "call_id": "c1", "execution": "client"}
    searched |= {"status": "completed", "arguments": {"query": "orders"}}
    lookup = {"type": "function", "name": "lookup", "parameters": {"type": "object"}}
    found = {"type": "tool_search_output", "call_id": "c1", "execution": "client"}
    found |= {"status": "completed", "tools": [lookup]}
    client_search = {"type": "tool_search", "execution": "client"}
    settings = GenerationSettings(tools=[TOOL, client_search])
    count = CountTokens(CreateResponse("m", [USER, searched, found], settings=settings))
    await setup.gateway.execute(Principal(), count)
    assert names(setup.backend.counted[-1]) == ["f", "lookup", "tool_search"]
