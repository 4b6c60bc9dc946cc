"""Counting input tokens with the upstream's tokenizer: vLLM's and llama.cpp's ``/tokenize``
(the real fake upstream, and scripted servers for the failures), and OpenAI's
``/responses/input_tokens`` for a Responses upstream."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from aiohttp import web

from stateway.backends.chat_forwarder import OpenAIChatBackend
from stateway.backends.chat_request import to_upstream
from stateway.backends.openai_responses import OpenAIResponsesBackend
from stateway.backends.responses_request import to_upstream as responses_body
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_target import UpstreamTarget
from stateway.core.errors import UpstreamError, UpstreamRejected
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import InferenceRequest
from stateway.fake_upstream.launch import start_fake_upstream
from tests.backends.conftest import Loopback

Backend = OpenAIChatBackend | OpenAIResponsesBackend


def request(text: str = "one two three", **fields: Any) -> InferenceRequest:
    item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
    return InferenceRequest(
        "m", fields.pop("instructions", None), [item], GenerationSettings(), False, **fields
    )


def backend(kind: type[Backend], url: str, loopback: Loopback) -> Backend:
    return kind(loopback.adopt(UpstreamClient(UpstreamTarget("up", url))))


@pytest.fixture(scope="module", params=["vllm", "llama.cpp", "sglang", "lmstudio", "none"])
def fake(request: pytest.FixtureRequest) -> Iterator[tuple[str, str]]:
    with start_fake_upstream(tokenizer=request.param) as url:
        yield request.param, url


@pytest.mark.parametrize("kind", [OpenAIChatBackend, OpenAIResponsesBackend])
async def test_count_through_the_fake_upstreams_tokenizer(
    fake: tuple[str, str], kind: type[Backend], loopback: Loopback
) -> None:
    dialect, url = fake
    counter = backend(kind, url, loopback)
    expected = {"vllm": 5, "llama.cpp": 5, "sglang": None, "lmstudio": None, "none": None}
    # vLLM: five words; llama.cpp: "<|system|>be", "kind", "<|user|>one", "two", "three";
    # SGLang's /tokenize of a prompt only refuses the chat (a 400), LM Studio has none (it
    # answers a 200 whose body is only an error): no count, an estimate
    assert await counter.count_tokens(request(instructions="be kind")) == expected[dialect]
    assert await counter.count_tokens(request(instructions="be kind")) == expected[dialect]


class LlamaCpp:
    """A scripted llama.cpp: records the paths asked; ``answers`` overrides a path's reply."""

    def __init__(self, answers: dict[str, Any] | None = None) -> None:
        self.paths: list[str] = []
        self.bodies: list[dict[str, Any]] = []
        self.answers = answers or {}

    async def handle(self, http: web.Request) -> web.StreamResponse:
        body = await http.json()
        self.paths.append(http.path)
        self.bodies.append(body)
        if http.path in self.answers:
            answer = self.answers[http.path]
            if isinstance(answer, int):
                return web.json_response({"error": {"message": "no"}}, status=answer)
            if isinstance(answer, bytes):
                return web.Response(body=answer, content_type="application/json")
            return web.json_response(answer)
        if http.path == "/apply-template":
            return web.json_response({"prompt": "<|user|>a b c d"})
        if http.path == "/tokenize":
            content = body.get("content")
            return web.json_response(
                {"tokens": list(range(len(content.split()))) if content else []}
            )
        return web.json_response({"error": {"message": "no route"}}, status=404)


async def test_a_llama_cpp_server_is_remembered(loopback: Loopback) -> None:
    server = LlamaCpp()
    counter = backend(OpenAIChatBackend, await loopback.serve(server.handle), loopback)
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    assert await counter.count_tokens(request(tools=tools)) == 4
    assert server.paths == ["/tokenize", "/apply-template", "/tokenize"]
    assert server.bodies[0]["add_generation_prompt"] is True
    model = to_upstream(request())["model"]  # a router (llama-server with several models)
    assert server.bodies[1] == {  # refuses a body without it
        "model": model,
        "messages": to_upstream(request(tools=tools))["messages"],
        "tools": to_upstream(request(tools=tools))["tools"],
    }
    assert server.bodies[2] == {"model": model, "content": "<|user|>a b c d", "add_special": True}
    assert await counter.count_tokens(request()) == 4
    assert server.paths[3:] == ["/apply-template", "/tokenize"]


@pytest.mark.parametrize(
    ("answers", "error"),
    [
        ({"/tokenize": {"nothing": 1}}, "malformed"),
        ({"/tokenize": b"not json"}, "malformed"),
        ({"/tokenize": [1, 2]}, "malformed"),
        ({"/apply-template": {"prompt": 3}}, "malformed"),
        ({"/tokenize": 500}, "answered 500"),
        ({"/apply-template": 503}, "answered 503"),
        ({"/apply-template": 400}, "answered 400"),  # the messages refused: not no tokenizer
    ],
)
async def test_tokenizer_failures_are_upstream_errors(
    loopback: Loopback, answers: dict[str, Any], error: str
) -> None:
    counter = backend(OpenAIChatBackend, await loopback.serve(LlamaCpp(answers).handle), loopback)
    with pytest.raises(UpstreamError, match=error):
        await counter.count_tokens(request())


async def test_an_answer_with_its_field_is_read_though_it_has_an_error_member(
    loopback: Loopback,
) -> None:
    """Only a body without the field a route answers in is an error (LM Studio's 200 to a
    route it does not serve): a server that adds ``"error": null`` beside it is counted."""
    answers = {
        "/tokenize": {"tokens": [0, 1], "error": None},
        "/apply-template": {"prompt": "<|user|>a b", "error": None},
    }
    counter = backend(OpenAIChatBackend, await loopback.serve(LlamaCpp(answers).handle), loopback)
    assert await counter.count_tokens(request()) == 2


@pytest.mark.parametrize(
    ("answers", "path"),
    [
        ({"/apply-template": {"prompt": 3}}, "/apply-template"),
        ({"/tokenize": {"nothing": 1}}, "/tokenize"),
        ({"/tokenize": b"not json"}, "/tokenize"),
    ],
)
async def test_a_malformed_answer_names_the_backend_and_the_route(
    loopback: Loopback, answers: dict[str, Any], path: str
) -> None:
    server = LlamaCpp(answers)
    counter = backend(OpenAIChatBackend, await loopback.serve(server.handle), loopback)
    message = f"The model server 'up' answered {path} with a malformed body."
    with pytest.raises(UpstreamError, match=re.escape(message)):
        await counter.count_tokens(request())


async def test_llama_cpp_tokens_must_be_a_list(loopback: Loopback) -> None:
    class Broken(LlamaCpp):
        async def handle(self, http: web.Request) -> web.StreamResponse:
            body = await http.json()
            if http.path == "/tokenize" and "content" in body:
                return web.json_response({"tokens": "many"})
            return await super().handle(http)

    counter = backend(OpenAIChatBackend, await loopback.serve(Broken().handle), loopback)
    with pytest.raises(UpstreamError, match="malformed"):
        await counter.count_tokens(request())


async def test_no_template_route_means_no_tokenizer(loopback: Loopback) -> None:
    counter = backend(
        OpenAIChatBackend, await loopback.serve(LlamaCpp({"/apply-template": 404}).handle), loopback
    )
    assert await counter.count_tokens(request()) is None


async def test_a_responses_upstream_counts_natively_first(loopback: Loopback) -> None:
    asked: list[tuple[str, dict[str, Any]]] = []

    async def openai_like(http: web.Request) -> web.Response:
        asked.append((http.path, await http.json()))
        return web.json_response({"object": "response.input_tokens", "input_tokens": 17})

    counter = backend(OpenAIResponsesBackend, await loopback.serve(openai_like), loopback)
    assert await counter.count_tokens(request(instructions="hi")) == 17
    [(path, body)] = asked
    assert path == "/v1/responses/input_tokens"
    assert body["instructions"] == "hi"
    assert "stream" not in body
    assert "store" not in body


@pytest.mark.parametrize(
    ("reply", "raised"),
    [
        (lambda: web.json_response({"input_tokens": "many"}), UpstreamError),
        (lambda: web.Response(body=b"{", content_type="application/json"), UpstreamError),
        (lambda: web.json_response({"error": {"message": "bad"}}, status=400), UpstreamRejected),
    ],
)
async def test_native_count_failures(
    loopback: Loopback, reply: Callable[[], web.Response], raised: type[Exception]
) -> None:
    # A fresh reply per request: aiohttp sends a response once, and a prepared one again
    # sends nothing, so one built at import time left the client waiting for headers
    # whenever the test ran twice in one process (as mutmut runs it).
    async def answer(http: web.Request) -> web.Response:
        return reply()

    counter = backend(OpenAIResponsesBackend, await loopback.serve(answer), loopback)
    with pytest.raises(raised):
        await counter.count_tokens(request())


async def test_a_200_that_is_only_an_error_is_no_native_count(loopback: Loopback) -> None:
    """LM Studio answers a route it does not serve with a 200 whose body is only an error
    (its ``/v1/responses`` has no ``input_tokens``, nor a ``/tokenize``): no count, so the
    gateway estimates, as where the routes are missing."""
    asked: list[str] = []

    async def lm_studio(http: web.Request) -> web.Response:
        asked.append(http.path)
        return web.json_response({"error": f"Unexpected endpoint or method. (POST {http.path})"})

    counter = backend(OpenAIResponsesBackend, await loopback.serve(lm_studio), loopback)
    assert await counter.count_tokens(request()) is None
    assert asked == ["/v1/responses/input_tokens", "/tokenize"]


async def test_a_file_part_cannot_be_tokenized_as_chat(loopback: Loopback) -> None:
    async def missing(http: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "no"}}, status=404)

    counter = backend(OpenAIResponsesBackend, await loopback.serve(missing), loopback)
    item = {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_file", "file_data": "data:application/pdf;base64,AA=="}],
    }
    counted = InferenceRequest("m", None, [item], GenerationSettings(), False)
    assert await counter.count_tokens(counted) is None


def test_compaction_items_never_reach_an_upstream() -> None:
    items = [
        {"type": "message", "role": "user", "content": "hi"},
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "sw1.x"},
        {"type": "compaction_trigger"},
    ]
    counted = InferenceRequest("m", None, items, GenerationSettings(), False)
    assert to_upstream(counted)["messages"] == [{"role": "user", "content": "hi"}]
    assert [item["type"] for item in responses_body(counted)["input"]] == ["message"]


async def test_a_count_is_of_the_body_a_call_would_send(loopback: Loopback) -> None:
    """The counted body is built as a round's: an assistant message of tool calls alone with
    the content the backend sends, earlier reasoning under the fields it sends it in."""
    server = LlamaCpp()
    client = loopback.adopt(
        UpstreamClient(UpstreamTarget("up", await loopback.serve(server.handle)))
    )
    counter = OpenAIChatBackend(client, reasoning_fields=("reasoning",), tool_call_content="")
    reasoning = {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "add"}],
    }
    call = {"type": "function_call", "call_id": "c1", "name": "add", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "5"}
    asked = request()
    items = [*asked.items, reasoning, call, output]
    await counter.count_tokens(InferenceRequest("m", None, items, GenerationSettings(), False))

    [called] = [m for m in server.bodies[0]["messages"] if m["role"] == "assistant"]
    assert called["content"] == ""
    assert called["reasoning"] == "add"
    assert "reasoning_content" not in called
