"""Field bounds of a Responses create that hosted OpenAI holds a request to, refused in its
words: fields read as they came (no upstream would refuse them the same way)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_compact, decode_create


def refused(decode: Any = decode_create, **fields: Any) -> InvalidRequest:
    with pytest.raises(InvalidRequest) as caught:
        decode(orjson.dumps({"model": "m", "input": "x", **fields}))
    return caught.value


@pytest.mark.parametrize("decode", [decode_create, decode_compact])
def test_a_prompt_cache_key_over_64_characters_is_refused_as_hosted(decode: Any) -> None:
    """Hosted: ``Invalid 'prompt_cache_key': string too long. Expected a string with maximum
    length 64, ...`` (``string_above_max_length``): an agent's session ids joined, say."""
    error = refused(decode, prompt_cache_key="k" * 65)
    assert (error.status, error.param, error.code) == (
        400,
        "prompt_cache_key",
        "string_above_max_length",
    )
    assert error.message == (
        "Invalid 'prompt_cache_key': string too long. Expected a string with maximum length "
        "64, but got a string with length 65 instead."
    )


def test_a_prompt_cache_key_of_64_characters_is_kept() -> None:
    body = {"model": "m", "input": "x", "prompt_cache_key": "k" * 64}
    assert decode_create(orjson.dumps(body)).settings.prompt_cache_key == "k" * 64
    assert decode_compact(orjson.dumps(body)).settings.prompt_cache_key == "k" * 64
