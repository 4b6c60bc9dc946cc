"""Decoding background requests and streamed retrieval of a response's event log."""

import orjson
import pytest

from stateway.core.commands import GetResponse, WatchResponse
from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.decode import decode_create
from stateway.protocols.responses.reads import decode_retrieve


def test_background_is_carried_to_the_command() -> None:
    body = {"model": "m", "input": "hi", "background": True, "stream": True}
    command = decode_create(orjson.dumps(body))
    assert command.background is True
    assert command.stream is True
    assert decode_create(orjson.dumps({"model": "m", "input": "hi"})).background is False


@pytest.mark.parametrize(
    ("query", "command"),
    [
        ({}, GetResponse("r", ())),
        ({"stream": "false"}, GetResponse("r", ())),
        ({"starting_after": "3"}, GetResponse("r", ())),  # without stream it does not matter
        ({"stream": "true"}, WatchResponse("r")),
        ({"stream": "True"}, WatchResponse("r")),
        ({"stream": "1", "starting_after": "0"}, WatchResponse("r", 0)),
        ({"stream": "true", "starting_after": "2147483647"}, WatchResponse("r", 2**31 - 1)),
    ],
)
def test_retrieve_is_a_get_or_a_watch(query: dict[str, str], command: object) -> None:
    assert decode_retrieve("r", query) == command


def test_retrieve_carries_its_include_and_checks_it_as_create_does() -> None:
    include = ["reasoning.encrypted_content", "message.output_text.logprobs"]
    assert decode_retrieve("r", {}, include) == GetResponse("r", tuple(include))
    for query in ({}, {"stream": "true"}):
        with pytest.raises(InvalidRequest) as caught:
            decode_retrieve("r", query, ["reasoning.encrypted_content", ""])
        assert (caught.value.param, caught.value.code) == ("include[1]", "invalid_value")


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "", "²", "2147483648", "9" * 5000])
def test_a_starting_after_that_is_no_sequence_number_is_refused(after: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decode_retrieve("r", {"stream": "true", "starting_after": after})
    assert caught.value.param == "starting_after"
    assert caught.value.code == "invalid_value"
    assert caught.value.status == 400
