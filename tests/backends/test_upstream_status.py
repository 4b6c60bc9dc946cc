"""Upstream HTTP errors to client errors, by status and structured code."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.backends.upstream_status import (
    classify_reply,
    classify_reported,
    classify_status,
    parse_error,
    reports_error,
    retry_after,
)
from stateway.core.errors import UpstreamContextTooLong, UpstreamOutputOverWindow


@pytest.mark.parametrize(
    ("status", "code", "client_status", "client_code"),
    [
        (404, None, 404, "model_not_found"),
        (404, "model_not_found", 404, "model_not_found"),
        (401, "invalid_api_key", 502, "upstream_auth_failed"),
        (403, None, 502, "upstream_auth_failed"),
        (402, None, 502, "upstream_auth_failed"),  # the gateway's account, not the client's
        (408, None, 504, "upstream_timeout"),
        (504, None, 504, "upstream_timeout"),
        (429, None, 429, "rate_limit_exceeded"),
        (429, "insufficient_quota", 429, "insufficient_quota"),
        (503, None, 503, "upstream_unavailable"),
        (529, None, 503, "upstream_overloaded"),
        (400, "context_length_exceeded", 400, "context_length_exceeded"),
        (422, None, 400, "upstream_rejected"),
        (413, None, 413, "request_too_large"),  # as hosted answers a body too large
        (413, "payload_too_large", 413, "payload_too_large"),
        (500, None, 502, "upstream_error"),
        (502, None, 502, "upstream_error"),
    ],
)
def test_status_and_code(
    status: int, code: str | None, client_status: int, client_code: str
) -> None:
    error = classify_status(status, "why", code, "up")
    assert (error.status, error.code) == (client_status, client_code)


def test_an_unknown_model_is_model_not_found_with_the_upstream_words() -> None:
    error = classify_status(404, "The model 'x' does not exist", None, "up")
    assert error.status == 404
    assert error.code == "model_not_found"
    assert error.type == "invalid_request_error"
    assert "does not exist" in error.message


@pytest.mark.parametrize(
    ("message", "code", "kind"),
    [
        ("slow down", None, "requests"),
        ("Rate limit reached for m on requests per min (RPM): Limit 3", None, "requests"),
        ("Rate limit reached for m on tokens per min (TPM): Limit 10000", None, "tokens"),
        ("Rate limit reached for m on tokens per day (TPD): Limit 200000", None, "tokens"),
        ("Rate limit reached for m on requests per day (RPD): Limit 14400", None, "requests"),
        ("would exceed 50,000 input Tokens per minute", "rate_limit_exceeded", "tokens"),
        (
            "You exceeded your current quota on tokens per min",
            "insufficient_quota",
            "insufficient_quota",
        ),
    ],
)
def test_an_upstream_rate_limit_is_typed_as_hosted_types_one(
    message: str, code: str | None, kind: str
) -> None:
    """Hosted types a 429 by what ran out (``requests``, ``tokens``: its words say which),
    a quota apart; the gateway's own limits are typed alike (``RateLimited``)."""
    assert classify_status(429, message, code, "up").type == kind


@pytest.mark.parametrize("status", [400, 404, 408, 413, 422, 429, 500, 503, 504, 529])
def test_the_message_names_the_server_its_status_and_its_words(status: int) -> None:
    said = f"Model server 'up' answered {status}"
    assert classify_status(status, "why", None, "up").message == f"{said}: why"
    assert classify_status(status, "", None, "up").message == f"{said}."


def test_credential_refusals_do_not_repeat_the_upstream_message() -> None:
    error = classify_status(401, "key sk-abc is wrong", None, "up")
    assert error.message == "Model server 'up' refused the gateway's credentials (401)."


@pytest.mark.parametrize("status", [300, 301, 307, 399])
def test_a_redirect_is_an_upstream_error_saying_so(status: int) -> None:
    error = classify_status(status, "moved", None, "up")
    assert (error.status, error.code) == (502, "upstream_error")
    assert error.message == (
        f"Model server 'up' redirected the call ({status}); redirects are not followed: "
        "configure the URL it redirects to."
    )


@pytest.mark.parametrize(
    ("status", "code", "retryable"),
    [
        (401, None, False),  # the gateway's credentials: its configuration
        (402, None, False),  # its account's payment
        (403, None, False),
        (307, None, False),  # a redirect, never followed
        (429, "insufficient_quota", False),  # a quota used up, not a rate
        (429, "rate_limit_exceeded", True),
        (429, None, True),
        (408, None, True),
        (500, None, True),
        (503, None, True),
        (529, None, True),
    ],
)
def test_a_refusal_the_same_request_meets_again_says_not_to_retry(
    status: int, code: str | None, retryable: bool
) -> None:
    """The SDKs retry a 429 or 5xx unless told ``x-should-retry: false``."""
    error = classify_status(status, "why", code, "up", {"Retry-After": "5"})
    assert error.retryable is retryable
    assert ("x-should-retry" in error.headers) is not retryable
    if not retryable:
        assert error.headers == {"x-should-retry": "false"}  # and no wait for nothing


@pytest.mark.parametrize("mid_stream", [False, True])
def test_a_quota_reported_in_a_reply_is_a_429_saying_not_to_retry(mid_stream: bool) -> None:
    """Hosted's ``response.failed`` (or an error body) with ``insufficient_quota``, which
    Codex does not retry either."""
    quota = {"type": "insufficient_quota", "code": "insufficient_quota", "message": "no"}
    error = classify_reported(quota, "up", str, mid_stream=mid_stream)
    assert (error.status, error.code, error.retryable) == (429, "insufficient_quota", False)


@pytest.mark.parametrize("status", [429, 503, 529])
@pytest.mark.parametrize(("wait", "retryable"), [("120", True), ("121", False)])
def test_a_wait_past_the_sdks_retries_says_not_to_retry(
    status: int, wait: str, retryable: bool
) -> None:
    """The ``openai`` SDK retries no wait over 120 s; the ``anthropic`` SDK sleeps any."""
    error = classify_status(status, "", None, "up", {"Retry-After": wait})
    assert error.retryable is retryable
    assert error.headers["Retry-After"] == wait  # still told when


@pytest.mark.parametrize("status", [429, 503, 529])
def test_retry_after_is_passed_on(status: int) -> None:
    error = classify_status(status, "", None, "up", {"Retry-After": "12"})
    assert error.headers == {"Retry-After": "12"}
    assert classify_status(status, "", None, "up", {}).headers == {}
    assert classify_status(status, "", None, "up").headers == {}


@pytest.mark.parametrize(
    ("value", "passed"),
    [
        ("3", "3"),
        (" 30 ", "30"),
        ("Wed, 21 Oct 2026 07:28:00 GMT", "Wed, 21 Oct 2026 07:28:00 GMT"),
        ("", None),
        ("1; drop", None),
        ("x" * 65, None),
    ],
)
def test_only_well_formed_retry_after_is_passed(value: str, passed: str | None) -> None:
    expected = {"Retry-After": passed} if passed else None
    assert retry_after({"Retry-After": value}) == expected


@pytest.mark.parametrize(
    ("raw", "parsed"),
    [
        (b'{"error": {"message": "m", "code": "c"}}', ("m", "c")),
        (b'{"error": {"detail": "d", "code": 3}}', ("d", None)),
        (b'{"error": "plain"}', ("plain", None)),
        (b'{"detail": "fastapi style"}', ("fastapi style", None)),
        (b"  not json \n", ("not json", None)),
        (b"[1]", ("", None)),
        (b'{"error": {}}', ("", None)),
        (b'{"error": null, "detail": "beside it"}', ("beside it", None)),
        (b'{"error": 5}', ("", None)),
        (b"a proxy's \xff page", ("a proxy's \ufffd page", None)),  # not UTF-8 either
    ],
)
def test_error_bodies(raw: bytes, parsed: tuple[str, str | None]) -> None:
    assert parse_error(raw) == parsed


@pytest.mark.parametrize(
    "raw",
    [
        # OpenAI
        b'{"error": {"message": "m", "type": "invalid_request_error", "param": "input",'
        b' "code": "context_length_exceeded"}}',
        # llama.cpp
        b'{"error": {"code": 400, "message": "m", "type": "exceed_context_size_error",'
        b' "n_prompt_tokens": 9, "n_ctx": 8}}',
        # vLLM, nested and (older) flat
        b'{"error": {"message": "m", "type": "BadRequestError", "param": "input_tokens",'
        b' "code": 400}}',
        b'{"object": "error", "message": "m", "type": "BadRequestError",'
        b' "param": "input_tokens", "code": 400}',
    ],
)
def test_context_overflow_is_recognised_by_structure(raw: bytes) -> None:
    message, code = parse_error(raw)
    assert (message, code) == ("m", "context_length_exceeded")
    error = classify_status(400, message, code, "up")
    assert (error.status, error.code) == (400, "context_length_exceeded")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"error": {"message": "m", "type": "BadRequestError", "param": "max_tokens"}}',
        b'{"error": {"message": "maximum context length exceeded", "type": ["odd"]}}',
        b'{"error": {"message": "m", "param": {"odd": 1}}}',
        b'{"error": {"message": "prompt is too long", "type": "invalid_request_error"}}',
        b'{"type": "error", "error": {"type": "invalid_request_error", "message": "too long"}}',
    ],
)
def test_other_refusals_are_not_taken_for_context_overflow(raw: bytes) -> None:
    assert parse_error(raw)[1] is None


LLAMA_CPP_TOO_LONG = {
    "code": 400,
    "message": "request (13392 tokens) exceeds the available context size (8192 tokens), "
    "try increasing it",
    "type": "exceed_context_size_error",
    "n_prompt_tokens": 13392,
    "n_ctx": 8192,
}
"""llama-server's refusal of a prompt over its context since ggml-org/llama.cpp#15780."""


def test_llama_cpp_s_context_refusal_says_its_numbers_in_fields() -> None:
    """``n_prompt_tokens`` and ``n_ctx`` are the prompt's tokens and the window, whatever
    its words (which have changed from build to build): a Messages client is told them as
    Anthropic tells them, in an answer's refusal and in a stream's ``error:`` line alike.
    The fields are read first: its words here say no numbers, or others."""
    for words in (
        "the request exceeds the available context size, try increasing it",
        "request (1 tokens) exceeds the available context size (2 tokens), try increasing it",
    ):
        refusal = {**LLAMA_CPP_TOO_LONG, "message": words}
        for error in (
            classify_reply(400, orjson.dumps({"error": refusal}), "up", str),
            classify_reply(400, orjson.dumps(refusal), "up", str),  # not under "error"
            classify_reported(refusal, "up", str, mid_stream=True),
        ):
            assert isinstance(error, UpstreamContextTooLong)
            assert (error.status, error.code, error.param) == (
                400,
                "context_length_exceeded",
                "input",
            )
            assert (error.tokens, error.window, error.requested) == (13392, 8192, None)
            assert error.message.endswith(words)


@pytest.mark.parametrize(
    "counts",
    [
        {},
        {"n_prompt_tokens": 13392},
        {"n_prompt_tokens": "13392", "n_ctx": 8192},
        {"n_prompt_tokens": True, "n_ctx": 8192},
        {"n_prompt_tokens": 0, "n_ctx": 0},  # llama.cpp's default, where it knows none
    ],
)
def test_a_context_refusal_without_both_counts_has_no_numbers(counts: dict[str, Any]) -> None:
    error = {"code": 400, "message": "too long", "type": "exceed_context_size_error", **counts}
    refused = classify_reply(400, orjson.dumps({"error": error}), "up", str)
    assert (refused.status, refused.code) == (400, "context_length_exceeded")
    assert not isinstance(refused, UpstreamContextTooLong)


def test_any_positive_counts_are_numbers() -> None:
    error = {"code": 400, "message": "too long", "type": "exceed_context_size_error"}
    error |= {"n_prompt_tokens": 2, "n_ctx": 1}
    refused = classify_reply(400, orjson.dumps({"error": error}), "up", str)
    assert isinstance(refused, UpstreamContextTooLong)
    assert (refused.tokens, refused.window) == (2, 1)


def test_a_reply_s_error_is_classified_with_the_key_scrubbed() -> None:
    raw = b'{"error": {"message": "bad key sk-1", "code": "invalid_request_error"}}'
    error = classify_reply(400, raw, "up", lambda said: said.replace("sk-1", "***"))
    assert (error.status, error.code) == (400, "invalid_request_error")
    assert error.message == "Model server 'up' answered 400: bad key ***"
    assert classify_reply(503, b"busy", "up", str, {"Retry-After": "3"}).headers == {
        "Retry-After": "3"
    }


VLLM_OLD = (
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(1000 in the messages, 4000 in the completion). Please reduce the length of the messages "
    "or completion."
)
VLLM_MAX_TOKENS = (
    "'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context "
    "length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None"
)
VLLM_NOW = (
    "This model's maximum context length is 32768 tokens. However, you requested 32000 output "
    "tokens and your prompt contains at least 1201 input tokens, for a total of at least 33201 "
    "tokens. Please reduce the length of the input prompt or the number of requested output "
    "tokens."
)
VLLM_INPUT_ALONE = (
    "This model's maximum context length is 4096 tokens. However, your request has 5000 input "
    "tokens. Please reduce the length of the input messages."
)
"""vLLM's refusal of a prompt over the context by itself: no output count."""


@pytest.mark.parametrize(
    ("message", "param", "numbers"),
    [
        (VLLM_OLD, None, (1000, 4000, 4096)),
        (VLLM_MAX_TOKENS, "max_tokens", (2778, 8000, 4096)),
        (VLLM_NOW, None, (1201, 32000, 32768)),
        (VLLM_INPUT_ALONE, None, (5000, None, 4096)),
        (
            "The decoder prompt (length 5000) is longer than the maximum model length of 4096.",
            None,
            (5000, None, 4096),
        ),
    ],
)
def test_vllm_s_unstructured_context_refusals_are_recognised_by_their_wording(
    message: str, param: str | None, numbers: tuple[int, int, int] | None
) -> None:
    """vLLM's refusals carry ``param`` null or ``max_tokens``: only their fixed wording
    (OpenAI's old one) says it; its numbers are kept when it says them."""
    raw = orjson.dumps(
        {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
    )
    assert parse_error(raw) == (message, "context_length_exceeded")
    error = classify_status(400, message, "context_length_exceeded", "up")
    assert (error.status, error.code) == (400, "context_length_exceeded")
    assert error.message == f"Model server 'up' answered 400: {message}"
    if numbers is None:
        assert not isinstance(error, UpstreamContextTooLong)
        return
    assert isinstance(error, UpstreamContextTooLong)
    assert (error.tokens, error.requested, error.window) == numbers


VLLM_AT_LEAST = (
    "This model's maximum context length is 32768 tokens. However, you requested 32000 output "
    "tokens and your prompt contains at least 769 input tokens, for a total of at least 32769 "
    "tokens. Please reduce the length of the input prompt or the number of requested output "
    "tokens."
)
"""vLLM's refusal since 0.18 (its renderer) of output tokens that leave no room for the
prompt: it stops tokenizing the prompt one token past the room ``max_tokens`` leaves, so
its count is that, whatever the prompt's length (32768 - 32000 + 1)."""
VLLM_PASSED = (
    "You passed 769 input tokens and requested 32000 output tokens. However, the model's "
    "context length is only 32768 tokens, resulting in a maximum input length of 768 tokens. "
    "Please reduce the length of the input prompt."
)
"""The same refusal in vLLM 0.16 and 0.17's words (``param`` ``input_tokens``), its count
stopped the same way."""


@pytest.mark.parametrize(
    ("message", "param", "at_least"),
    [
        (VLLM_AT_LEAST, "input_tokens", True),
        (VLLM_PASSED, "input_tokens", True),
        (VLLM_PASSED, None, True),  # its words alone say it too
        (VLLM_OLD, None, False),
        (VLLM_MAX_TOKENS, "max_tokens", False),
    ],
)
def test_a_vllm_refusal_counting_the_prompt_only_in_part_says_so(
    message: str, param: str | None, at_least: bool
) -> None:
    """vLLM's renderer counts a prompt only as far as it could fit: the count a refusal
    states is then at least the prompt's, not the prompt's (the room it leaves is no room
    the window has, :mod:`stateway.core.rounds`)."""
    raw = orjson.dumps(
        {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}
    )
    error = classify_reply(400, raw, "up", str)
    assert isinstance(error, UpstreamContextTooLong)
    assert error.code == "context_length_exceeded"
    assert error.at_least is at_least
    if message is VLLM_AT_LEAST or message is VLLM_PASSED:
        assert (error.tokens, error.requested, error.window) == (769, 32000, 32768)


@pytest.mark.parametrize(
    "message",
    [
        "m",
        VLLM_OLD,
        "This model's maximum context length is 4096 tokens.",  # no input count
        "Your request has 5000 input tokens.",  # no window
    ],
)
def test_a_context_overflow_names_the_input(message: str) -> None:
    """As hosted names it (``input``; a Chat client's ``messages``), whatever the server
    named (vLLM: null, ``input_tokens`` or ``max_tokens``)."""
    error = classify_status(400, message, "context_length_exceeded", "up")
    assert (error.code, error.param) == ("context_length_exceeded", "input")


def test_anthropic_s_context_overflow_is_recognised_by_its_documented_wording() -> None:
    """Anthropic's error has no code for it: only its shape and its message say it."""
    message = "prompt is too long: 210000 tokens > 200000 maximum"
    raw = orjson.dumps(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )
    assert parse_error(raw) == (message, "context_length_exceeded")


def test_llama_cpp_s_context_refusal_before_its_type_is_recognised_by_its_wording() -> None:
    """llama-server before its ``exceed_context_size_error`` type (ggml-org/llama.cpp#15780,
    September 2025) refused a prompt over its context as any invalid request: only its
    fixed wording says it (and the same builds sent it mid-stream, as an ``error:`` line)."""
    message = (
        "the request exceeds the available context size. try increasing the context size or "
        "enable context shift"
    )
    error = {"code": 400, "message": message, "type": "invalid_request_error"}
    assert parse_error(orjson.dumps({"error": error})) == (message, "context_length_exceeded")
    reported = classify_reported(error, "up", str, mid_stream=True)
    assert (reported.status, reported.code) == (400, "context_length_exceeded")


LM_STUDIO_TOO_LONG = (
    "Input does not fit in context length. The input has 31430 tokens, but the context length "
    "only supports 30000 tokens."
)


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": LM_STUDIO_TOO_LONG}, "message": LM_STUDIO_TOO_LONG},
        {"error": LM_STUDIO_TOO_LONG},  # LM Studio's other errors are words alone
    ],
)
def test_lm_studio_s_context_refusal_is_recognised_by_its_wording(body: dict[str, Any]) -> None:
    """LM Studio's refusal has no code or type for it (lmstudio-ai/lmstudio-bug-tracker#2322)."""
    assert parse_error(orjson.dumps(body)) == (LM_STUDIO_TOO_LONG, "context_length_exceeded")
    error = classify_status(400, LM_STUDIO_TOO_LONG, "context_length_exceeded", "up")
    assert (error.status, error.code) == (400, "context_length_exceeded")
    reported = classify_reported(body["error"], "up", str, mid_stream=True)
    assert (reported.status, reported.code) == (400, "context_length_exceeded")


def test_lm_studio_s_refusal_says_its_numbers_in_words() -> None:
    refused = classify_reply(400, orjson.dumps({"error": LM_STUDIO_TOO_LONG}), "up", str)
    assert isinstance(refused, UpstreamContextTooLong)
    assert (refused.tokens, refused.window, refused.requested) == (31430, 30000, None)


SGLANG_INPUT_ALONE = (
    "The input (40000 tokens) is longer than the model's context length (32768 tokens)."
)
SGLANG_WITH_OUTPUT = (
    "Requested token count exceeds the model's maximum context length of 32768 tokens. You "
    "requested a total of 33201 tokens: 1201 tokens from the input messages and 32000 tokens "
    "for the completion. Please reduce the number of tokens in the input messages or the "
    "completion to fit within the limit."
)
SGLANG_SCHEDULER = (
    "Input length (258174 tokens) exceeds the maximum allowed length (186353 tokens). Use a "
    "shorter input or enable --allow-auto-truncate."
)
"""SGLang's refusals of a context too long, none with a code or type for it: its tokenizer
manager's (``_validate_one_request``: the input alone, then with the output asked for) and
its scheduler's (``validate_input_length``, sent as a stream's error event)."""


@pytest.mark.parametrize(
    ("message", "numbers"),
    [
        (SGLANG_INPUT_ALONE, (40000, None, 32768)),
        (SGLANG_WITH_OUTPUT, (1201, 32000, 32768)),
        (SGLANG_SCHEDULER, (258174, None, 186353)),
    ],
)
def test_sglang_s_context_refusals_are_recognised_with_their_numbers(
    message: str, numbers: tuple[int, int | None, int]
) -> None:
    """SGLang answers ``{"object": "error", "message", "type": "BadRequestError", "code":
    400}``, and reports the same object mid-stream in an ``error`` member: its words alone
    say the context is too long, and how much (the output asked for too: Claude Code then
    asks for fewer output tokens, where a compaction would not help)."""
    error = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
    assert parse_error(orjson.dumps(error)) == (message, "context_length_exceeded")
    for refused in (
        classify_reply(400, orjson.dumps(error), "up", str),
        classify_reported(error, "up", str, mid_stream=True),
    ):
        assert isinstance(refused, UpstreamContextTooLong)
        assert (refused.status, refused.code, refused.param) == (
            400,
            "context_length_exceeded",
            "input",
        )
        assert (refused.tokens, refused.requested, refused.window) == numbers


OLLAMA_SHIFT_OFF = (
    "the prompt is longer than the context length currently available to the model; shorten "
    "the prompt, adjust the context length in settings, or use a model with a longer context "
    "length"
)
OLLAMA_NO_TRUNCATION = "the input length exceeds the context length"
OLLAMA_LLAMA_SERVER = orjson.dumps({"error": LLAMA_CPP_TOO_LONG}).decode()
"""Ollama's runner on llama-server passes its error body on as the message's text."""


@pytest.mark.parametrize(
    ("message", "numbers"),
    [
        (OLLAMA_SHIFT_OFF, None),
        (OLLAMA_NO_TRUNCATION, None),
        (OLLAMA_LLAMA_SERVER, (13392, 8192)),
    ],
)
def test_ollama_s_context_refusals_are_recognised_by_their_wording(
    message: str, numbers: tuple[int, int] | None
) -> None:
    """Ollama's OpenAI layer answers ``{"error": {"message", "type":
    "invalid_request_error", "param": null, "code": null}}``: words only, its runner's
    (``llm/llama_server.go``, ``runner/ollamarunner``) or llama-server's whole error body,
    whose words say its numbers."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    assert parse_error(orjson.dumps(body)) == (message, "context_length_exceeded")
    refused = classify_reply(400, orjson.dumps(body), "up", str)
    assert (refused.status, refused.code) == (400, "context_length_exceeded")
    if numbers is None:
        assert not isinstance(refused, UpstreamContextTooLong)
    else:
        assert isinstance(refused, UpstreamContextTooLong)
        assert (refused.tokens, refused.window) == numbers


@pytest.mark.parametrize(
    "message",
    [
        "The number of tokens to keep from the initial prompt is greater than the context "
        "length (n_keep: 13055>= n_ctx: 4096). Try to load the model with a larger context "
        "length, or provide a shorter input.",
        "Trying to keep the first 15857 tokens when context the overflows. However, the model "
        "is loaded with context length of only 4096 tokens, which is not enough. Try to load "
        "the model with a larger context length, or provide a shorter input",
        "Cannot truncate prompt with n_keep (15028) >= n_ctx (7424)",
    ],
)
def test_lm_studio_s_other_context_refusals_are_recognised_by_their_wording(
    message: str,
) -> None:
    """LM Studio's llama.cpp engine refuses a prompt longer than the context it loaded the
    model with in these words, as ``{"error": "..."}`` (lmstudio-ai/lmstudio-bug-tracker#237,
    #546; anomalyco/opencode#2259, #11141)."""
    assert parse_error(orjson.dumps({"error": message})) == (message, "context_length_exceeded")
    refused = classify_reply(400, orjson.dumps({"error": message}), "up", str)
    assert (refused.status, refused.code) == (400, "context_length_exceeded")


@pytest.mark.parametrize(
    "error",
    [
        {"message": LLAMA_CPP_TOO_LONG["message"], "code": "context_length_exceeded"},
        {
            "message": "This model's maximum context length is 8192 tokens. However, your "
            "request has 13392 input tokens.",
            "type": "invalid_request_error",
        },
    ],
)
def test_a_413_that_refuses_the_context_is_a_context_refusal(error: dict[str, Any]) -> None:
    """Some proxies and model servers answer a prompt over the window with a 413: what it
    refuses decides, as for any other 4xx (a 400 ``context_length_exceeded`` naming
    ``input``, with the numbers it says), not the status of a body over a size limit."""
    refused = classify_reply(413, orjson.dumps({"error": error}), "up", str)
    assert (refused.status, refused.code, refused.param) == (
        400,
        "context_length_exceeded",
        "input",
    )
    if "maximum context length" in str(error["message"]):
        assert isinstance(refused, UpstreamContextTooLong)
        assert (refused.tokens, refused.window) == (13392, 8192)


def test_a_reported_request_too_large_is_a_413() -> None:
    """Anthropic's type for a body over its size limit names its status, 413."""
    error = {"type": "request_too_large", "message": "Request exceeds the maximum size"}
    reported = classify_reported(error, "up", str, mid_stream=False)
    assert (reported.status, reported.code, reported.type) == (
        413,
        "request_too_large",
        "invalid_request_error",
    )


@pytest.mark.parametrize("number", [399, 600, 4290])
def test_a_reported_code_outside_the_error_statuses_leaves_the_type_to_say_it(
    number: int,
) -> None:
    error = {"code": number, "type": "rate_limit_error", "message": "slow down"}
    reported = classify_reported(error, "up", str, mid_stream=True)
    assert (reported.status, reported.code) == (429, "rate_limit_exceeded")


def test_a_reported_error_whose_type_is_no_name_is_a_502() -> None:
    error = {"type": ["not", "a", "name"], "message": "m"}
    reported = classify_reported(error, "up", str, mid_stream=False)
    assert (reported.status, reported.code) == (502, "upstream_error")


LLAMA_SERVER_NO_IMAGES = {
    "code": 500,
    "message": "image input is not supported - hint: if this is unexpected, you may need to "
    "provide the mmproj",
    "type": "server_error",
}
"""llama-server's refusal of an image for a model loaded without a projector (``--mmproj``):
an exception its handler answers with a 500, as any but a few."""


@pytest.mark.parametrize(
    "body",
    [
        # vLLM, a model without a vision tower
        {"object": "error", "message": "Qwen/Qwen3-8B is not a multimodal model", "code": 400},
        # llama-server without a projector (with a 500: below)
        {"error": LLAMA_SERVER_NO_IMAGES},
        # Ollama, a text-only model
        {"error": {"message": "this model does not support image input", "code": None}},
    ],
)
def test_a_model_that_takes_no_images_is_recognised_by_its_wording(body: dict[str, Any]) -> None:
    """No server gives such a refusal a code: its fixed words alone say it, by which a
    Messages client is told which block to leave out."""
    message, code = parse_error(orjson.dumps(body))
    assert code == "image_input_unsupported"
    error = classify_status(400, message, code, "up")
    assert (error.status, error.code) == (400, "image_input_unsupported")


def test_llama_server_s_refusal_of_an_image_is_the_request_s_though_it_answers_500() -> None:
    """Not a failing server (a 502, which fails the candidate over and counts against its
    circuit): the request's image, refused (a 400), which a Messages client leaves out."""
    refused = classify_reply(500, orjson.dumps({"error": LLAMA_SERVER_NO_IMAGES}), "up", str)
    assert (refused.status, refused.code) == (400, "image_input_unsupported")
    assert "image input is not supported" in refused.message


def test_llama_server_s_refusal_of_streamed_logprobs_with_tools_is_told_by_its_words() -> None:
    """Its only tell: the Chat backend asks such a round whole on it."""
    body = {
        "error": {
            "code": 400,
            "message": "logprobs is not supported with tools + stream",
            "type": "invalid_request_error",
        }
    }
    refused = classify_reply(400, orjson.dumps(body), "up", str)
    assert (refused.status, refused.code) == (400, "streamed_logprobs_unsupported")
    other = {"error": {**body["error"], "message": "top_logprobs requires logprobs"}}
    assert classify_reply(400, orjson.dumps(other), "up", str).code == "upstream_rejected"


def test_lm_studio_s_refusal_of_null_content_is_told_by_its_words() -> None:
    """LM Studio refuses a message whose content is null (an assistant message of tool
    calls alone, as the spec sends it) with its words alone, in a 400: its only tell, on
    which the Chat backend sends the call again with ``""``."""
    words = "Invalid 'content': 'content' field must be a string or an array of objects.."
    refused = classify_reply(400, orjson.dumps({"error": words}), "up", str)
    assert (refused.status, refused.code) == (400, "null_content_unsupported")
    assert refused.message == f"Model server 'up' answered 400: {words}"
    other = {"error": "Invalid 'messages' in payload."}
    assert classify_reply(400, orjson.dumps(other), "up", str).code == "upstream_rejected"


def test_lm_studio_s_answer_to_a_route_it_does_not_serve_is_a_404() -> None:
    """LM Studio answers a route it does not serve (a URL without ``/v1``) with a 200
    whose body is only its words (lmstudio-ai/lmstudio-bug-tracker#618): a 404, as other
    servers answer one, so a wrong URL reads as one."""
    words = "Unexpected endpoint or method. (POST /chat/completions)"
    reported = classify_reported(words, "up", str, mid_stream=False)
    assert (reported.status, reported.code) == (404, "model_not_found")
    assert reported.message == f"Model server 'up' answered with an error: {words}"


@pytest.mark.parametrize(
    ("body", "reported"),
    [
        ({"error": {"message": "m"}}, True),
        ({"type": "error", "error": {"type": "overloaded_error"}}, True),
        ({"error": None}, True),
        ({"choices": [], "error": None}, False),  # an answer, whatever else it carries
        ({"choices": [{"index": 0}], "error": {"message": "m"}}, False),
        ({"object": "chat.completion.chunk", "usage": {}}, False),  # neither: not an error
        ({}, False),
    ],
)
def test_a_body_reports_an_error_when_it_has_one_and_no_answer(
    body: dict[str, Any], reported: bool
) -> None:
    assert reports_error(body, "choices") is reported


@pytest.mark.parametrize(
    ("error", "status"),
    [
        ({"type": "authentication_error", "message": "invalid x-api-key"}, 401),
        ({"type": "permission_error", "message": "m"}, 403),
        ({"code": 402, "message": "Insufficient credits"}, 402),  # OpenRouter's
    ],
)
def test_a_reported_credential_refusal_is_the_gateway_s_naming_the_server(
    error: dict[str, Any], status: int
) -> None:
    refused = classify_reported(error, "up", str, mid_stream=True)
    assert (refused.status, refused.code) == (502, "upstream_auth_failed")
    assert refused.message == f"Model server 'up' refused the gateway's credentials ({status})."


@pytest.mark.parametrize(
    ("words", "requested", "window"),
    [
        ("max_tokens=32000 cannot be greater than max_model_len=8192.", 32000, 8192),
        (
            "max_tokens=8888 cannot be greater than max_model_len=max_total_tokens=3072.",
            8888,
            3072,
        ),
        (
            "max_completion_tokens=131072 cannot be greater than max_model_len=128000",
            131072,
            128000,
        ),
    ],
)
def test_output_tokens_over_the_whole_window_keep_their_numbers(
    words: str, requested: int, window: int
) -> None:
    """vLLM's refusal (0.16 on) before it counts the prompt: a 400 as it came, not a
    context too long (nothing says the prompt is), with the numbers a Messages request
    needs to ask again for the room."""
    body = {"error": {"message": words, "type": "BadRequestError", "param": "max_tokens"}}
    error = classify_reply(400, orjson.dumps(body | {"code": 400}), "vllm", str)
    assert isinstance(error, UpstreamOutputOverWindow)
    # named as the request's output limit (the Responses field: a frontend names its own)
    assert (error.status, error.code, error.param) == (
        400,
        "upstream_rejected",
        "max_output_tokens",
    )
    assert (error.requested, error.window) == (requested, window)
    assert words in error.message


def test_other_refusals_of_max_tokens_are_not_over_the_window() -> None:
    body = {"error": {"message": "max_tokens must be at least 1, got 0.", "param": "max_tokens"}}
    error = classify_reply(400, orjson.dumps(body), "vllm", str)
    assert not isinstance(error, UpstreamOutputOverWindow)
    assert error.code == "upstream_rejected"
