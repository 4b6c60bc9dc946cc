"""What model servers advertise of their context windows, read as each tells it: vLLM's
and SGLang's listings (LoRA adapters by their parent), llama.cpp's listing or, of its
older builds, its ``/props`` (per slot),
Anthropic's ``max_input_tokens``; scripted servers on loopback, and the real fake."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.anthropic import AnthropicBackend
from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.backend import AdvertisedWindows
from stateway.core.errors import UpstreamError, UpstreamRejected
from stateway.fake_upstream.launch import FakeOptions, start_fake_upstream
from stateway.fake_upstream.listing import N_CTX_TRAIN
from tests.backends.conftest import Loopback

VLLM = [
    {"id": "qwen3-8b", "object": "model", "max_model_len": 40960, "root": "/models/qwen3"},
    {"id": "qwen3-8b-lora", "object": "model", "max_model_len": None, "parent": "qwen3-8b"},
]
SGLANG = [  # its listing's adapters alike, and its base model by its served name only
    {"id": "llama-3.1-8b", "object": "model", "max_model_len": 131072, "root": "llama-3.1-8b"},
    {"id": "sql-lora", "object": "model", "max_model_len": None, "parent": "llama-3.1-8b"},
]
LLAMA_CPP = [
    {
        "id": "/models/qwen3-8b-q4.gguf",
        "object": "model",
        "owned_by": "llamacpp",
        "meta": {"vocab_type": 2, "n_vocab": 151936, "n_ctx_train": 40960, "n_embd": 4096},
    }
]
LLAMA_CPP_NOW = [  # its current builds: one slot's window in ``meta`` too
    {
        "id": "qwen3-8b",
        "aliases": ["qwen3-8b"],
        "object": "model",
        "owned_by": "llamacpp",
        "meta": {"n_vocab": 151936, "n_ctx": 8192, "n_ctx_train": 40960, "n_embd": 4096},
    }
]
OPENAI = [{"id": "gpt-5", "object": "model", "created": 0, "owned_by": "system"}]


class Server:
    """A scripted model server: ``listing`` at ``/v1/models``, ``props`` at ``/props``
    (an int: that status); records the paths asked."""

    def __init__(self, listing: list[dict[str, Any]], props: Any = 404) -> None:
        self.listing = listing
        self.props = props
        self.paths: list[str] = []

    async def handle(self, http: web.Request) -> web.StreamResponse:
        self.paths.append(http.path)
        if http.path == "/v1/models":
            return web.json_response({"object": "list", "data": self.listing})
        if http.path == "/props" and not isinstance(self.props, int):
            return web.json_response(self.props)
        status = self.props if http.path == "/props" else 404
        return web.json_response({"error": {"message": "no"}}, status=status)


async def advertised(server: Server, loopback: Loopback, kind: Any = OpenAIChatBackend) -> Any:
    url = await loopback.serve(server.handle)
    backend = kind(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))
    return await backend.advertised_windows()


@pytest.mark.parametrize("kind", [OpenAIChatBackend, OpenAIResponsesBackend])
async def test_vllm_lists_each_models_window_and_an_adapter_has_its_parents(
    loopback: Loopback, kind: Any
) -> None:
    server = Server(VLLM)
    windows = await advertised(server, loopback, kind)
    assert windows == AdvertisedWindows({"qwen3-8b": 40960, "qwen3-8b-lora": 40960})
    assert windows.of("another") is None
    assert server.paths == ["/v1/models"]  # no /props asked of a server that said


async def test_sglang_lists_them_alike(loopback: Loopback) -> None:
    windows = await advertised(Server(SGLANG), loopback)
    assert windows.models == {"llama-3.1-8b": 131072, "sql-lora": 131072}


@pytest.mark.parametrize("kind", [OpenAIChatBackend, OpenAIResponsesBackend])
async def test_llama_cpp_serves_the_window_of_one_slot_not_the_trained_one(
    loopback: Loopback, kind: Any
) -> None:
    """``-c 32768 --parallel 4``: each request has 8192 tokens, as ``/props`` says; the
    listing's ``n_ctx_train`` (40960) is what the model could hold, not what is served."""
    props = {"default_generation_settings": {"n_ctx": 8192, "params": {}}, "total_slots": 4}
    server = Server(LLAMA_CPP, props)
    windows = await advertised(server, loopback, kind)
    assert windows == AdvertisedWindows(server=8192)
    assert windows.of("whatever-name-a-route-gives") == 8192  # it serves its one model
    assert server.paths == ["/v1/models", "/props"]


async def test_llama_cpp_lists_the_window_of_one_slot_in_its_meta(loopback: Loopback) -> None:
    """Its current builds tell ``meta.n_ctx`` beside ``n_ctx_train``: no ``/props``."""
    server = Server(LLAMA_CPP_NOW, props=500)
    windows = await advertised(server, loopback)
    assert windows == AdvertisedWindows(server=8192)
    assert windows.of("whatever-name-a-route-gives") == 8192
    assert server.paths == ["/v1/models"]


async def test_llama_cpp_s_router_lists_each_loaded_model_s_window(loopback: Loopback) -> None:
    """llama-server's router mode (``--models-dir``, several models, each its own server)
    lists each model by name, with the ``meta`` of its server once loaded; its ``/props``
    tells no window (``n_ctx`` 0), so the listing is all there is to learn from."""
    loaded = [
        {**LLAMA_CPP_NOW[0], "status": {"value": "loaded"}},
        {
            "id": "gemma-4b",
            "status": {"value": "loaded"},
            "meta": {"n_ctx": 4096, "n_ctx_train": 131072},
        },
        {"id": "unloaded", "owned_by": "llamacpp", "status": {"value": "unloaded"}},
    ]
    router_props = {"role": "router", "default_generation_settings": {"n_ctx": 0}}
    server = Server(loaded, router_props)
    windows = await advertised(server, loopback)
    assert windows == AdvertisedWindows({"qwen3-8b": 8192, "gemma-4b": 4096})
    assert windows.of("unloaded") is None
    assert server.paths == ["/v1/models"]


@pytest.mark.parametrize(
    "props", [{"total_slots": 1}, {"default_generation_settings": {"n_ctx": 0}}, [1]]
)
async def test_llama_cpp_props_without_a_window_advertise_none(
    loopback: Loopback, props: Any
) -> None:
    assert await advertised(Server(LLAMA_CPP, props), loopback) == AdvertisedWindows()


@pytest.mark.parametrize(("status", "error"), [(404, UpstreamRejected), (503, UpstreamError)])
async def test_llama_cpp_props_failing_fail_the_asking(
    loopback: Loopback, status: int, error: type[Exception]
) -> None:
    with pytest.raises(error):
        await advertised(Server(LLAMA_CPP, status), loopback)


@pytest.mark.parametrize(
    "entry",
    [
        OPENAI[0],
        {"id": "m", "max_model_len": True},
        {"id": "m", "max_model_len": "32768"},
        {"id": "m", "max_model_len": -1},
        {"id": "m", "parent": "unlisted"},
        {"max_model_len": 4096},
    ],
)
async def test_a_listing_without_windows_advertises_none(
    loopback: Loopback, entry: dict[str, Any]
) -> None:
    server = Server([entry])
    assert await advertised(server, loopback) == AdvertisedWindows()
    assert server.paths == ["/v1/models"]  # not a llama.cpp listing: no /props


async def test_a_window_is_a_whole_number_of_tokens_from_one(loopback: Loopback) -> None:
    """Read as the server wrote it, down to one token; an entry that is no object (a bare
    id some proxies list) is passed over, not taken for llama.cpp's."""
    listing: list[Any] = ["bare-id", {"id": "tiny", "max_model_len": 1}]
    listing += [{"id": "half", "max_model_len": 0.5}, {"id": "none", "max_model_len": 0}]
    server = Server(listing)
    assert await advertised(server, loopback) == AdvertisedWindows({"tiny": 1})
    assert server.paths == ["/v1/models"]
    unwindowed = Server(["bare-id", {"id": "m"}])
    assert await advertised(unwindowed, loopback) == AdvertisedWindows()
    assert unwindowed.paths == ["/v1/models"]


async def test_anthropic_lists_max_input_tokens_over_every_page(loopback: Loopback) -> None:
    models = [f"claude-{n}" for n in range(1500)]

    async def listing(http: web.Request) -> web.Response:
        start = models.index(http.query["after_id"]) + 1 if "after_id" in http.query else 0
        page = models[start : start + int(http.query["limit"])]
        data = [
            {"type": "model", "id": m, "max_input_tokens": 200000 + i} for i, m in enumerate(page)
        ]
        more = start + len(page) < len(models)
        return web.json_response({"data": data, "has_more": more, "last_id": page[-1]})

    url = await loopback.serve(listing)
    claude = AnthropicBackend(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))
    windows = await claude.advertised_windows()
    assert len(windows.models) == 1500
    assert windows.of("claude-0") == windows.of("claude-1000") == 200000
    assert windows.of("claude-1001") == 200001
    assert await claude.list_models() == models


@pytest.fixture(
    scope="module",
    params=[
        ({"max_model_len": 4096}, {"fake-model": 4096}, None),
        ({"ctx_size": 16384, "parallel": 4}, {}, 4096),
        ({}, {}, None),
    ],
    ids=["vllm", "llama.cpp", "silent"],
)
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[str, AdvertisedWindows]]:
    options: FakeOptions
    options, models, server = request.param
    with start_fake_upstream(**options) as url:
        yield url, AdvertisedWindows(models, server)


@pytest.mark.parametrize("kind", [OpenAIChatBackend, OpenAIResponsesBackend, AnthropicBackend])
async def test_the_fake_tells_its_window_as_the_server_it_plays(
    fake: tuple[str, AdvertisedWindows], kind: Any, loopback: Loopback
) -> None:
    url, expected = fake
    headers = (("anthropic-version", "2023-06-01"),) if kind is AnthropicBackend else ()
    client = loopback.adopt(UpstreamClient(UpstreamTarget("up", url, headers=headers)))
    windows = await kind(client).advertised_windows()
    assert windows == expected
    assert N_CTX_TRAIN not in {*windows.models.values(), windows.server}
