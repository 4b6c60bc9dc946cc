"""The fake upstream's tokenizer routes, its ``[[context:N]]`` refusal and its answer to the
gateway's compaction prompt."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from openai import OpenAI

from stateway.core.compaction.prompt import STANDALONE_SUMMARY_PROMPT, SUMMARY_PROMPT
from stateway.fake_upstream import build_app
from stateway.fake_upstream.app import FakeUpstreamApp
from stateway.fake_upstream.listing import Windows
from stateway.fake_upstream.plan import SUMMARY_HEADING
from stateway.fake_upstream.script import parse_script

MESSAGES = [
    {"role": "system", "content": "be kind"},
    {"role": "user", "content": [{"type": "text", "text": "one two three"}]},
]


async def post(app: FakeUpstreamApp, path: str, body: Any, method: str = "POST") -> tuple[int, Any]:
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": orjson.dumps(body), "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    await app({"type": "http", "method": method, "path": path, "headers": []}, receive, send)
    return sent[0]["status"], orjson.loads(sent[1]["body"])


async def test_vllm_tokenizer_counts_words_like_usage() -> None:
    app = build_app()
    assert await post(app, "/tokenize", {"model": "m", "messages": MESSAGES}) == (
        200,
        {"count": 5, "max_model_len": 32768, "tokens": [0, 1, 2, 3, 4]},
    )
    status, answer = await post(app, "/tokenize", {"prompt": "a b"})
    assert (status, answer["count"]) == (200, 2)
    status, error = await post(app, "/tokenize", {"content": "a b"})
    assert (status, error["error"]["param"]) == (400, "prompt")
    assert (await post(app, "/apply-template", {"messages": MESSAGES}))[0] == 404
    assert (await post(app, "/tokenize", {}, method="GET"))[0] == 405


async def test_llama_cpp_tokenizer_needs_the_template_first() -> None:
    app = build_app(tokenizer="llama.cpp")
    model = {"model": "m"}
    assert await post(app, "/tokenize", {**model, "messages": MESSAGES}) == (200, {"tokens": []})
    status, rendered = await post(app, "/apply-template", {**model, "messages": MESSAGES})
    assert (status, rendered) == (200, {"prompt": "<|system|>be kind\n<|user|>one two three"})
    assert await post(app, "/tokenize", {**model, "content": rendered["prompt"]}) == (
        200,
        {"tokens": [0, 1, 2, 3, 4]},
    )
    for bad in (model, {**model, "messages": []}, {**model, "messages": ["x"]}):
        assert (await post(app, "/apply-template", bad))[0] == 400
    # as llama-server's router mode (several models): no model, no answer
    assert (await post(app, "/apply-template", {"messages": MESSAGES}))[0] == 400
    assert (await post(app, "/tokenize", {"content": "a b"}))[0] == 400


async def test_sglang_tokenizer_takes_a_prompt_only() -> None:
    """As SGLang's ``/tokenize`` in releases whose request has a ``prompt`` and no
    ``messages``: a chat body is refused as its validation refuses one, a 400."""
    app = build_app(tokenizer="sglang")
    status, answer = await post(app, "/tokenize", {"model": "m", "prompt": "a b"})
    assert (status, answer["count"], answer["max_model_len"]) == (200, 2, 32768)
    status, error = await post(app, "/tokenize", {"model": "m", "messages": MESSAGES})
    assert (status, error["error"]["param"]) == (400, "prompt")
    assert (await post(app, "/apply-template", {"messages": MESSAGES}))[0] == 404


async def test_lm_studio_serves_no_tokenizer_with_a_200() -> None:
    """As LM Studio answers any route it does not serve (lmstudio-bug-tracker#618): a 200
    whose body is only an error."""
    app = build_app(tokenizer="lmstudio")
    for path in ("/tokenize", "/apply-template"):
        assert await post(app, path, {"prompt": "a"}) == (
            200,
            {"error": f"Unexpected endpoint or method. (POST {path})"},
        )


async def test_no_tokenizer() -> None:
    app = build_app(tokenizer="none")
    assert (await post(app, "/tokenize", {"prompt": "a"}))[0] == 404
    assert (await post(app, "/apply-template", {"messages": MESSAGES}))[0] == 404


def test_context_directive_parses() -> None:
    assert parse_script("hi [[context:30]]").context == 30
    assert parse_script("[[context:x]]").context is None


@pytest.mark.parametrize("wire", ["chat", "responses"])
def test_context_directive_refuses_a_longer_prompt(client: OpenAI, wire: str) -> None:
    text = "one two three [[context:3]]"  # four words with the directive
    messages: Any = [{"role": "user", "content": text}]
    with pytest.raises(openai.BadRequestError) as refused:
        _ = (
            client.chat.completions.create(model="m", messages=messages)
            if wire == "chat"
            else client.responses.create(model="m", input=text)
        )
    error = refused.value.body
    assert isinstance(error, dict)
    if wire == "chat":  # as vLLM
        assert (error["type"], error["param"], error["code"]) == (
            "BadRequestError",
            "input_tokens",
            400,
        )
    else:  # as OpenAI
        assert error["code"] == "context_length_exceeded"
    fits = "two [[context:2]]"
    assert client.responses.create(model="m", input=fits).output_text == "Hello! You said: two"


def test_llamacpp_refuses_a_streamed_prompt_as_llama_server_s_2025_builds(
    client: OpenAI,
) -> None:
    """``[[llamacpp]]``: a 200, an ``error:`` line, ``[DONE]`` (which an event-stream reader
    takes for a stream without a chunk)."""
    text = "one two three [[context:3]] [[llamacpp]]"
    messages: Any = [{"role": "user", "content": text}]
    with client.chat.completions.with_streaming_response.create(
        model="m", messages=messages, stream=True
    ) as raw:
        assert raw.status_code == 200
        body = raw.read()
    assert body.startswith(b'error: {"code":400,"message":"the request exceeds the available')
    assert body.endswith(b"\n\ndata: [DONE]\n\n")


def test_llamacpp_refuses_an_unstreamed_prompt_as_llama_server_does_now(client: OpenAI) -> None:
    """``[[llamacpp]]``: a 400 typed ``exceed_context_size_error``, the prompt's tokens and
    the window in ``n_prompt_tokens`` and ``n_ctx``, in llama-server's words."""
    text = "one two three [[context:3]] [[llamacpp]]"
    messages: Any = [{"role": "user", "content": text}]
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model="m", messages=messages)
    assert refused.value.body == {
        "code": 400,
        "message": "request (5 tokens) exceeds the available context size (3 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 5,
        "n_ctx": 3,
    }


def test_the_compaction_prompt_is_answered_with_a_transcript(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "system", "content": "You are a long system prompt."},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello"},
            {"role": "user", "content": SUMMARY_PROMPT},
        ],
    )
    # The conversation only: instructions stay in place, and a client's system prompt
    # (Codex's: thousands of words) would make every summary, and its echo, that long.
    assert reply.choices[0].message.content == "\n".join(
        [SUMMARY_HEADING, "user: hi", "assistant: hello"]
    )


def test_instructions_added_to_the_prompt_end_the_summary(client: OpenAI) -> None:
    """Followed as given: their directives run again in the answer sampled from it, where
    the conversation's are quoted."""
    asked = f"{STANDALONE_SUMMARY_PROMPT}\n\n[[words:0]]"
    reply = client.chat.completions.create(
        model="m",
        messages=[
            {"role": "user", "content": "hi [[words:2]]"},
            {"role": "user", "content": asked},
        ],
    )
    assert reply.choices[0].message.content == "\n".join(
        [SUMMARY_HEADING, "user: hi [ [words:2]]", "[[words:0]]"]
    )


def _chat(words: int, **fields: Any) -> dict[str, Any]:
    text = " ".join(["w"] * words)
    return {"model": "m", "messages": [{"role": "user", "content": text}], **fields}


async def test_a_max_model_len_refuses_a_longer_prompt_on_every_wire_as_its_server_does() -> None:
    """``--max-model-len``: the window vLLM tells is the one it keeps, whatever the script:
    a longer prompt is refused (a compaction's summary call too, which no directive
    scripts), in each wire's words."""
    app = build_app(windows=Windows(max_model_len=10))
    assert (await post(app, "/v1/chat/completions", _chat(10)))[0] == 200
    status, error = await post(app, "/v1/chat/completions", _chat(11))
    assert (status, error["error"]["param"]) == (400, "input_tokens")
    assert "maximum context length is 10 tokens" in error["error"]["message"]
    status, error = await post(app, "/v1/responses", {"model": "m", "input": "w " * 11})
    assert (status, error["error"]["code"]) == (400, "context_length_exceeded")
    body = {"model": "m", "max_tokens": 5, **_chat(11)}
    status, error = await post(app, "/v1/messages", {**body, "messages": body["messages"]})
    assert (status, error["error"]["message"]) == (
        400,
        "prompt is too long: 11 tokens > 10 maximum",
    )


async def test_a_max_model_len_refuses_a_prompt_and_output_over_it_as_vllm_does() -> None:
    """vLLM refuses the output tokens asked for that do not fit beside the prompt, saying
    both (on its Chat wire, here); none asked, any prompt that fits is answered."""
    app = build_app(windows=Windows(max_model_len=10))
    status, error = await post(app, "/v1/chat/completions", _chat(6, max_tokens=5))
    assert (status, error["error"]["param"]) == (400, "max_tokens")
    assert error["error"]["message"] == (
        "This model's maximum context length is 10 tokens. However, you requested 11 "
        "tokens (6 in the messages, 5 in the completion). Please reduce the length of the "
        "messages or completion."
    )
    assert (await post(app, "/v1/chat/completions", _chat(6, max_tokens=4)))[0] == 200
    assert (await post(app, "/v1/chat/completions", _chat(10)))[0] == 200


async def test_a_max_model_len_kept_as_vllm_s_renderer_counts_the_prompt_in_part() -> None:
    """``--vllm-renderer``: vLLM's renderer counts the prompt only one token past the room
    the output tokens asked for leave (``at least``), whatever its length; output tokens
    over the window are refused before any count."""
    app = build_app(windows=Windows(max_model_len=10, renderer=True))
    status, error = await post(app, "/v1/chat/completions", _chat(8, max_tokens=5))
    assert (status, error["error"]["param"]) == (400, "input_tokens")
    assert error["error"]["message"].startswith(
        "This model's maximum context length is 10 tokens. However, you requested 5 output "
        "tokens and your prompt contains at least 6 input tokens, for a total of at least 11 "
        "tokens."
    )
    status, error = await post(app, "/v1/chat/completions", _chat(2, max_tokens=11))
    assert (status, error["error"]["param"]) == (400, "max_tokens")
    assert error["error"]["message"].startswith(
        "max_tokens=11 cannot be greater than max_model_len=10."
    )
    assert (await post(app, "/v1/chat/completions", _chat(5, max_tokens=5)))[0] == 200
