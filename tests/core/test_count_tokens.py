"""``CountTokens``: counted by the upstream when it can, else estimated; checked like a run."""

from __future__ import annotations

import base64

import pytest

from stateway.core.commands import CountTokens, CreateResponse, GenerationSettings
from stateway.core.errors import InvalidRequest, ModelNotFound, NotFound
from stateway.core.gateway import Gateway
from stateway.core.inference import Finish, InferenceRequest
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Router
from stateway.core.runs import RunRegistry
from stateway.core.token_estimate import (
    IMAGE_TOKENS,
    LOW_DETAIL_IMAGE_TOKENS,
    PDF_PAGE_TOKENS,
    estimate_context,
    estimate_tokens,
    item_tokens,
)
from tests.core.fakes import MemoryStore, ScriptedBackend

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
