"""WebSocket frames: the envelope, the HTTP body's own decoder, and refusals by name."""

from __future__ import annotations

import orjson
import pytest

from stateway.core.errors import (
    GatewayError,
    InvalidRequest,
    PreviousResponseNotFound,
    RateLimited,
)
from stateway.protocols.responses.frames import (
    CreateFrame,
    ProcessedFrame,
    ResumeFrame,
    SteerFrame,
    decode_frame,
    encode_error_frame,
    peek_frame,
    stream_id_of,
    with_stream_id,
)


def decoded(frame: dict[str, object]) -> object:
    kind, fields = peek_frame(orjson.dumps(frame))
    return decode_frame(kind, fields, max_input_items=2)


def test_a_create_frame_is_the_http_body_plus_its_envelope() -> None:
    frame = decoded(
        {
            "type": "response.create",
            "model": "m",
            "input": "hi",
            "store": False,
            "generate": False,
            "stream_id": "lane-1",
            "command_id": "c1",
        }
    )
    assert isinstance(frame, CreateFrame)
    assert (frame.stream_id, frame.command_id) == ("lane-1", "c1")
    command = frame.command
    assert (command.stream, command.generate, command.store) == (True, False, False)
    assert command.input[0]["content"][0]["text"] == "hi"


@pytest.mark.parametrize("generate", [None, True, False])
def test_a_cache_prewarm_is_a_prewarm_whatever_generate_says(generate: bool | None) -> None:
    """As hosted: ``prompt_cache_options.prewarm`` overrides ``generate`` to false."""
    frame = {"type": "response.create", "model": "m", "input": "hi", "generate": generate}
    options = {"prompt_cache_options": {"prewarm": True}}
    prewarm = decoded({**frame, **options})
    assert isinstance(prewarm, CreateFrame)
    assert prewarm.command.generate is False
    plain = decoded(frame)
    assert isinstance(plain, CreateFrame)
    assert plain.command.generate is (generate is not False)


CODEX_PREWARM = (
    b'{"type":"response.create","model":"gpt-6.2-sol","stream":true,"input":[],'
    b'"tool_choice":"auto","parallel_tool_calls":false,'
    b'"reasoning":{"effort":"low","context":"all_turns"},"store":false,'
    b'"include":["reasoning.encrypted_content"],"prompt_cache_key":"k",'
    b'"text":{"verbosity":"low"},"generate":false,"client_metadata":{"turn_id":""}}'
)
"""Codex 0.171.0's startup prewarm with its default model: no input, no instructions, no
tools (those come as input items with the turn)."""


def test_a_prewarm_needs_nothing_to_respond_to() -> None:
    """A prewarm answers nothing, so an empty context is no missing input (refused, Codex
    warned and opened another socket for its turn); a create that generates still needs
    one."""
    kind, fields = peek_frame(CODEX_PREWARM)
    frame = decode_frame(kind, fields)
    assert isinstance(frame, CreateFrame)
    assert (frame.command.generate, frame.command.input) == (False, [])
    with pytest.raises(InvalidRequest) as caught:
        decode_frame(kind, {**fields, "generate": True})
    assert (caught.value.param, caught.value.code) == ("input", "missing_required_parameter")


def test_resume_and_steer_frames() -> None:
    resume = decoded({"type": "response.resume", "response_id": "resp_1", "starting_after": 3})
    assert isinstance(resume, ResumeFrame)
    assert (resume.watch.response_id, resume.watch.starting_after) == ("resp_1", 3)
    assert resume.watch.replay
    assert resume.watch.refuse_at_end  # a socket has no end of stream to say nothing follows
    steer = decoded({"type": "response.steer", "previous_response_id": "r", "input": "x"})
    assert steer == SteerFrame("r", "x")


def test_a_response_processed_acknowledgement_names_its_response() -> None:
    """Codex's acknowledgement of a turn it read to its end: decoded (its session answers
    nothing), and refused as any frame without the field it needs."""
    assert decoded({"type": "response.processed", "response_id": "resp_1"}) == ProcessedFrame(
        "resp_1"
    )
    with pytest.raises(InvalidRequest) as caught:
        decoded({"type": "response.processed", "response_id": 5})
    assert (caught.value.code, caught.value.param) == ("invalid_type", "response_id")


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        (b"not json", "invalid_json"),
        (b"[1]", "invalid_type"),
        (b'{"model": "m"}', "missing_required_parameter"),
        (b'{"type": 5}', "invalid_type"),
        (b'{"type": null}', "invalid_type"),
        (b'{"type": ["response.create"]}', "invalid_type"),
    ],
)
def test_frames_that_are_not_objects_with_a_type(raw: bytes, code: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        peek_frame(raw)
    assert caught.value.code == code
    assert caught.value.status == 400
    if code != "invalid_json" and raw.startswith(b"{"):
        assert caught.value.param == "type"


def test_a_type_that_is_not_a_string_is_not_called_missing() -> None:
    with pytest.raises(InvalidRequest) as caught:
        peek_frame(b'{"type": 5}')
    assert caught.value.to_dict() == {
        "type": "invalid_request_error",
        "code": "invalid_type",
        "message": "Invalid type for 'type': expected a string, such as 'response.create'.",
        "param": "type",
    }


@pytest.mark.parametrize(
    ("frame", "code", "param"),
    [
        ({"type": "response.cancel"}, "unknown_frame_type", "type"),
        ({"type": "response.create", "input": "x"}, "missing_required_parameter", "model"),
        (
            {"type": "response.create", "model": "m", "stream_id": 5},
            "invalid_stream_id",
            "stream_id",
        ),
        (
            {"type": "response.create", "model": "m", "stream_id": ""},
            "invalid_stream_id",
            "stream_id",
        ),
        ({"type": "response.create", "model": "m", "command_id": 7}, "invalid_type", "command_id"),
        (
            {"type": "response.create", "model": "m", "command_id": ""},
            "empty_string",
            "command_id",
        ),
        (
            {"type": "response.create", "model": "m", "command_id": "c" * 256},
            "string_above_max_length",
            "command_id",
        ),
        ({"type": "response.create", "model": "m", "generate": "no"}, "invalid_type", "generate"),
        ({"type": "response.resume", "response_id": 5}, "invalid_type", "response_id"),
        ({"type": "response.resume", "response_id": ""}, "empty_string", "response_id"),
        (
            {"type": "response.resume", "response_id": "r", "starting_after": "3"},
            "invalid_type",
            "starting_after",
        ),
        (
            {"type": "response.resume", "response_id": "r", "starting_after": 1.5},
            "invalid_type",
            "starting_after",
        ),
        (
            {"type": "response.steer", "previous_response_id": 5, "input": "x"},
            "invalid_type",
            "previous_response_id",
        ),
        ({"type": "response.create", "model": "m", "input": [{}, {}, {}]}, None, "input"),
        (
            {"type": "response.create", "model": "m", "background": True},
            "unsupported_parameter",
            "background",
        ),
        (
            {"type": "response.create", "model": "m", "background": "yes"},
            "invalid_type",
            "background",
        ),
        (
            {"type": "response.resume", "response_id": "r", "starting_after": -1},
            "integer_below_min_value",
            "starting_after",
        ),
        ({"type": "response.steer", "input": "x"}, "missing_required_parameter", None),
        ({"type": "response.steer", "previous_response_id": ""}, "empty_string", None),
        ({"type": "response.steer", "previous_response_id": "r"}, None, "input"),
    ],
)
def test_bad_frames_are_refused_naming_the_problem(
    frame: dict[str, object], code: str | None, param: str | None
) -> None:
    with pytest.raises(InvalidRequest) as caught:
        decoded(frame)
    assert caught.value.message
    if code is not None:
        assert caught.value.code == code
    if param is not None:
        assert caught.value.param == param


@pytest.mark.parametrize("kind", ["response.create", "response.resume", "response.interrupt"])
def test_a_stream_id_is_what_hosted_takes_and_anything_else_is_invalid_stream_id(
    kind: str,
) -> None:
    """Hosted (and the ``openai`` SDK's lane helper, which checks it before sending) takes
    1 to 256 ASCII letters, digits, underscores, hyphens or periods, and names any other
    ``invalid_stream_id``: a 256-character lane the SDK sends was refused as too long,
    and one with a space or a slash taken."""
    frame: dict[str, object] = {
        "type": kind,
        "model": "m",
        "input": "hi",
        "response_id": "resp_1",
        "mode": "discard_partial_items",
    }
    lane = "Lane_1.a-" + "x" * 247
    accepted = decoded({**frame, "stream_id": lane})
    if isinstance(accepted, CreateFrame | ResumeFrame):
        assert accepted.stream_id == lane
    for bad in ["x" * 257, "", "has space", "a/b", "é", 5, True]:
        with pytest.raises(InvalidRequest) as caught:
            decoded({**frame, "stream_id": bad})
        assert caught.value.to_dict() == {
            "type": "invalid_request_error",
            "code": "invalid_stream_id",
            "message": "Invalid 'stream_id': expected 1 to 256 ASCII letters, digits, "
            "underscores, hyphens or periods.",
            "param": "stream_id",
        }, bad
        assert stream_id_of({"stream_id": bad}) is None  # not echoed on the error frame


def test_error_frames_and_lanes_on_events() -> None:
    frame = orjson.loads(encode_error_frame(PreviousResponseNotFound("resp_x"), "a"))
    assert frame["type"] == "error"
    assert frame["status"] == 400
    assert frame["error"]["code"] == "previous_response_not_found"
    assert frame["stream_id"] == "a"
    event = orjson.loads(with_stream_id(b'{"type":"response.created","sequence_number":0}', "b"))
    assert event == {"type": "response.created", "sequence_number": 0, "stream_id": "b"}
    assert with_stream_id(b"{}", None) == b"{}"


def test_an_error_frame_carries_its_retry_after_and_no_other_header() -> None:
    """Where hosted's frame (``error.headers``) and Codex (the frame's ``headers``) read it;
    an answer's other headers (``Connection: close``, ``WWW-Authenticate``) mean nothing
    on a socket."""
    limited = orjson.loads(encode_error_frame(RateLimited("tokens", 100, 2.5)))
    assert limited["error"]["headers"] == limited["headers"] == {"retry-after": "3"}
    assert limited["error"]["type"] == "tokens"
    closing = GatewayError("gone", status=400, headers={"Connection": "close"})
    for error in (closing, PreviousResponseNotFound("resp_x")):
        frame = orjson.loads(encode_error_frame(error))
        assert "headers" not in frame
        assert "headers" not in frame["error"]
