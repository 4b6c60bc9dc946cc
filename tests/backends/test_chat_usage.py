"""The usage a relayed Chat Completions answer reports, found in its last bytes."""

from __future__ import annotations

import pytest

from stateway.backends.chat_usage import from_chat_usage, reported_usage
from stateway.core.usage import Usage

COMPLETION = (
    b'{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":'
    b'{"role":"assistant","content":"the \\"usage\\": {\\"prompt_tokens\\": 999}"},'
    b'"finish_reason":"stop"}],"usage":{"prompt_tokens":12,"completion_tokens":5,'
    b'"total_tokens":17,"prompt_tokens_details":{"cached_tokens":4,"cache_write_tokens":3},'
    b'"completion_tokens_details":{"reasoning_tokens":2}}}'
)
STREAM_END = (
    b'data: {"id":"c","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":null}\n\n'
    b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":8,'
    b'"total_tokens":11}}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("tail", "usage"),
    [
        (COMPLETION, Usage(12, 5, cached_tokens=4, reasoning_tokens=2, cache_write_tokens=3)),
        (COMPLETION[COMPLETION.rindex(b"usage") - 9 :], Usage(12, 5, 4, 2, 3)),  # a tail
        (STREAM_END, Usage(3, 8)),
        (b'{"usage" : {"prompt_tokens": 1, "completion_tokens": 2}}', Usage(1, 2)),
        (b'{"usage":{"prompt_tokens":1,"completion_tokens":2},"x":{"y":{}}}', Usage(1, 2)),
        (b'{"usage":{"a":{"b":{"c":{}}},"prompt_tokens":1,"d":{}},"e":{}}', Usage(1)),  # deep
        (b'{"usage":{"prompt_tokens":7.0,"prompt_tokens_details":null}}', Usage(7)),
        (b'{"usage":{"completion_tokens":null,"completion_tokens_details":{}}}', Usage()),
    ],
)
def test_the_last_usage_object_is_read(tail: bytes, usage: Usage) -> None:
    assert reported_usage(tail) == usage


@pytest.mark.parametrize(
    "tail",
    [
        b"",
        b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n',  # not asked for
        b'data: {"choices":[],"usage":null}\n\n',
        b'{"usage":{"prompt_tokens":1,',  # cut off
        b'{"usage":{"prompt_tokens_details":{"cached_tokens":1}',  # cut off, nested
        b'{"usage":{"prompt_tokens":1 ] }',  # not JSON
        b'{"usage":{"prompt_tokens":"many"}}',  # not a count
        b'{"usage":{"prompt_tokens":-1}}',
        b'{"usage":{"completion_tokens":true}}',
        b'{"usage":{"prompt_tokens_details":{"cached_tokens":1.5}}}',
        b'{"usage":{"completion_tokens_details":[]}}',
        b'{"usage"',
        b'{"error":{"message":"bad"}}',
    ],
)
def test_no_usage_is_none(tail: bytes) -> None:
    assert reported_usage(tail) is None


@pytest.mark.parametrize(
    ("usage", "reasoning"),
    [
        ({"completion_tokens": 9, "reasoning_tokens": 6}, 6),  # SGLang's place for them
        ({"completion_tokens": 9, "reasoning_tokens": 6, "completion_tokens_details": None}, 6),
        (  # SGLang's details, of speculative decoding only
            {
                "completion_tokens": 9,
                "reasoning_tokens": 6,
                "completion_tokens_details": {"accepted_prediction_tokens": 4},
            },
            6,
        ),
        (  # both: the details' count, as OpenAI's and vLLM's
            {
                "completion_tokens": 9,
                "reasoning_tokens": 5,
                "completion_tokens_details": {"reasoning_tokens": 6},
            },
            6,
        ),
    ],
)
def test_reasoning_tokens_are_read_where_sglang_reports_them(
    usage: dict[str, object], reasoning: int
) -> None:
    """SGLang reports an answer's reasoning tokens beside its other counts (``usage``'s
    own ``reasoning_tokens``), not in ``completion_tokens_details`` as OpenAI and vLLM
    do: read there when the details do not say them."""
    assert from_chat_usage(usage) == Usage(0, 9, reasoning_tokens=reasoning)
