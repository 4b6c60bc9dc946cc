"""WebSocket mode's frames (``GET /v1/responses`` upgraded) <-> canonical commands.

Client frames are JSON text frames with a ``type``:

- ``response.create``: the ``POST /v1/responses`` body (decoded by the very decoder of
  that route, :func:`~stateway.protocols.responses.decode.decode_create_fields`) plus the
  envelope: ``generate`` (false: a prewarm, as the body's ``prompt_cache_options.prewarm``
  makes it whatever ``generate`` says), ``stream_id`` (the lane), ``command_id``
  (exactly once). Over a socket a response always streams, and never in the background.
- ``response.steer``: the SDK's steering frame, ``{previous_response_id, input}``: user
  input queued for a response of this connection (its input is checked by
  :mod:`.steering`, and a bad one answered with ``response.steer.failed``).
- ``response.resume``: ``{response_id, starting_after}``, a run's events after a sequence
  number (stateway's own frame, for clients that reconnect: ``docs/websocket.md``).
- ``response.interrupt``: ``{response_id, mode: "discard_partial_items"}``: stop a
  response of this connection now; it ends ``incomplete`` (``interrupted``) with the items
  it had completed, and continues like a completed one (Codex sends it to steer a turn
  at once).
- ``response.processed``: ``{response_id}``, Codex's acknowledgement of a turn it has
  read to its end (its ``responses_websocket_response_processed`` feature): taken, and
  answered with nothing (Codex reads no answer; its next turn reads on from there).

Server frames are the Responses stream events, the JSON of the SSE ``data:`` lines (a
lane's carry its ``stream_id``), and error frames
``{"type": "error", "status": N, "error": {type, code, message, param}}`` (and a
``Retry-After`` in ``error.headers`` and ``headers``).

The models below are the frames' JSON Schema (``schemas/websocket-frames.json``,
:mod:`stateway.schemas`); decoding validates the envelope with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeVar

import orjson
import pydantic
from pydantic import BaseModel, ConfigDict, Field

from stateway.core.commands import CreateResponse, WatchResponse
from stateway.core.coordination import MAX_COMMAND_ID
from stateway.core.errors import GatewayError, InvalidRequest
from stateway.protocols.responses.body import invalid_request
from stateway.protocols.responses.decode import decode_create_fields
from stateway.protocols.responses.request import CreateResponseBody

MAX_STREAM_ID: Final = 256
"""The longest ``stream_id`` accepted (as hosted)."""
STREAM_ID_PATTERN: Final = r"^[A-Za-z0-9_.-]+$"
"""What a ``stream_id`` is made of, as hosted takes it (and the ``openai`` SDK's lane
helper checks it before sending): ASCII letters, digits, underscores, hyphens, periods."""
_STREAM_ID: Final = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_STREAM_ID}}}")
MAX_SEQUENCE_NUMBER: Final = 2**31 - 1
ANSWERLESS: Final = frozenset({"response.interrupt", "response.processed"})
"""Frames that ask for no answer, so none is sent, not even a shutdown's 503 (a client
reads an error frame as the failure of what it reads next)."""

M = TypeVar("M", bound=BaseModel)


class CreateEnvelope(BaseModel):
    """What a ``response.create`` frame carries beside the HTTP body."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["response.create"]
    generate: bool | None = None
    """False: a prewarm (the context rehydrated and checked, no output, no inference)."""
    stream_id: str | None = Field(
        default=None, min_length=1, max_length=MAX_STREAM_ID, pattern=STREAM_ID_PATTERN
    )
    """The lane: frames of one lane run one after the other, lanes side by side."""
    command_id: str | None = Field(default=None, min_length=1, max_length=MAX_COMMAND_ID)
    """Run at most once: a retry (on any socket) streams the first attempt's events; 1 to
    255 characters, as an ``Idempotency-Key`` (refused as the frame comes, not once its
    lane is free)."""


class ResponseCreateFrame(CreateEnvelope, CreateResponseBody):
    """``response.create``: the ``POST /v1/responses`` body and the envelope."""


class ResponseSteerFrame(BaseModel):
    """``response.steer``: user messages queued for a continuation of a response running
    (or waiting for its client's tool output) on this connection; its lane is the
    response's."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["response.steer"]
    previous_response_id: str = Field(min_length=1)
    """The response to steer."""
    input: str | list[dict[str, Any]]
    """A string, or user messages (``type``, ``role``, ``content``: text, image and file
    parts)."""


class ResponseResumeFrame(BaseModel):
    """``response.resume``: the events of a response after ``starting_after`` (all of
    them when absent), then its live ones to its end."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["response.resume"]
    response_id: str = Field(min_length=1)
    starting_after: int | None = Field(default=None, ge=0, le=MAX_SEQUENCE_NUMBER)
    stream_id: str | None = Field(
        default=None, min_length=1, max_length=MAX_STREAM_ID, pattern=STREAM_ID_PATTERN
    )
    """The lane the events go out on (and carry)."""


class ResponseInterruptFrame(BaseModel):
    """``response.interrupt``: stop a response this connection runs, at once; the items
    it was writing are discarded, those it had completed kept."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["response.interrupt"]
    response_id: str = Field(min_length=1)
    mode: Literal["discard_partial_items"]
    stream_id: str | None = Field(
        default=None, min_length=1, max_length=MAX_STREAM_ID, pattern=STREAM_ID_PATTERN
    )


class ResponseProcessedFrame(BaseModel):
    """``response.processed``: a client has read a response to its end (Codex's
    acknowledgement); nothing is answered."""

    model_config = ConfigDict(extra="ignore")

    type: Literal["response.processed"]
    response_id: str = Field(min_length=1)


class ErrorDetail(BaseModel):
    type: str
    code: str | None
    message: str = Field(min_length=1)
    param: str | None = None
    headers: dict[str, str] | None = None
    """What the HTTP answer's headers would say that a client acts on (``retry-after``)."""


class ErrorFrame(BaseModel):
    type: Literal["error"]
    status: int = Field(ge=400, le=599)
    error: ErrorDetail
    stream_id: str | None = None
    """The lane of the frame that failed, when it named one."""
    headers: dict[str, str] | None = None
    """``error.headers`` again, where Codex reads them."""


CLIENT_FRAMES: Final = (
    ResponseCreateFrame,
    ResponseSteerFrame,
    ResponseResumeFrame,
    ResponseInterruptFrame,
    ResponseProcessedFrame,
)
SERVER_FRAMES: Final = (ErrorFrame,)


def frame_schemas() -> dict[str, Any]:
    """The frames' JSON Schemas by type: what ``schemas/websocket-frames.json`` holds."""
    return {
        "client": {_type_of(model): model.model_json_schema() for model in CLIENT_FRAMES},
        "server": {_type_of(model): model.model_json_schema() for model in SERVER_FRAMES},
    }


def _type_of(model: type[BaseModel]) -> str:
    annotation = model.model_fields["type"].annotation
    return str(annotation.__args__[0])  # type: ignore[union-attr]


@dataclass(slots=True)
class CreateFrame:
    command: CreateResponse
    stream_id: str | None
    command_id: str | None


@dataclass(slots=True, frozen=True)
class SteerFrame:
    previous_response_id: str
    input: Any
    """As sent: checked by :func:`~stateway.protocols.responses.steering.decode_steer_input`
    (a bad one is a ``response.steer.failed``, which returns it)."""


@dataclass(slots=True, frozen=True)
class ResumeFrame:
    watch: WatchResponse
    stream_id: str | None


@dataclass(slots=True, frozen=True)
class InterruptFrame:
    response_id: str


@dataclass(slots=True, frozen=True)
class ProcessedFrame:
    response_id: str


ClientFrame = CreateFrame | SteerFrame | ResumeFrame | InterruptFrame | ProcessedFrame


def peek_frame(data: str | bytes) -> tuple[str, dict[str, Any]]:
    """The frame's ``type`` and its JSON object; a frame that is not one is refused."""
    try:
        fields = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise InvalidRequest(
            "The frame is not valid JSON; expected a JSON object with a 'type'.",
            code="invalid_json",
        ) from None
    if not isinstance(fields, dict):
        raise InvalidRequest("The frame must be a JSON object.", code="invalid_type")
    if "type" not in fields:
        raise InvalidRequest(
            "Missing required parameter: 'type'.",
            param="type",
            code="missing_required_parameter",
        )
    kind = fields["type"]
    if not isinstance(kind, str):
        raise InvalidRequest(
            "Invalid type for 'type': expected a string, such as 'response.create'.",
            param="type",
            code="invalid_type",
        )
    return kind, fields


def stream_id_of(fields: dict[str, Any]) -> str | None:
    """The frame's lane as it names it, for its error frame (whatever else is wrong); none
    for a ``stream_id`` that names no lane (its ``invalid_stream_id`` goes out on the
    default lane)."""
    value = fields.get("stream_id")
    return value if isinstance(value, str) and _STREAM_ID.fullmatch(value) else None


def _check_stream_id(fields: dict[str, Any]) -> None:
    """A ``stream_id`` other than hosted's is refused with hosted's code, whatever is
    wrong with it (its type, its length, a character)."""
    value = fields.get("stream_id")
    if value is not None and stream_id_of(fields) is None:
        raise InvalidRequest(
            f"Invalid 'stream_id': expected 1 to {MAX_STREAM_ID} ASCII letters, digits, "
            "underscores, hyphens or periods.",
            param="stream_id",
            code="invalid_stream_id",
        )


def decode_frame(
    kind: str, fields: dict[str, Any], *, max_input_items: int | None = None
) -> ClientFrame:
    match kind:
        case "response.create":
            _check_stream_id(fields)
            envelope = _validated(CreateEnvelope, fields)
            if fields.get("background") is True:  # another type: refused as over HTTP
                raise InvalidRequest(
                    "'background' is not supported over a WebSocket: a response created "
                    "here runs to its end even when the socket closes; resume it with "
                    "'response.resume'.",
                    param="background",
                    code="unsupported_parameter",
                )
            command = decode_create_fields(
                fields, max_input_items=max_input_items, generate=envelope.generate is not False
            )
            command.stream = True
            return CreateFrame(command, envelope.stream_id, envelope.command_id)
        case "response.steer":
            previous = fields.get("previous_response_id")
            if not isinstance(previous, str) or not previous or "input" not in fields:
                _validated(ResponseSteerFrame, fields)  # raises: no target, or no input
            return SteerFrame(str(previous), fields["input"])
        case "response.resume":
            _check_stream_id(fields)
            resume = _validated(ResponseResumeFrame, fields)
            watch = WatchResponse(
                resume.response_id, resume.starting_after, replay=True, refuse_at_end=True
            )
            return ResumeFrame(watch, resume.stream_id)
        case "response.interrupt":
            _check_stream_id(fields)
            return InterruptFrame(_validated(ResponseInterruptFrame, fields).response_id)
        case "response.processed":
            return ProcessedFrame(_validated(ResponseProcessedFrame, fields).response_id)
        case _:
            raise InvalidRequest(
                f"Unknown frame type {kind[:64]!r}; expected 'response.create', "
                "'response.steer', 'response.resume', 'response.interrupt' or "
                "'response.processed'.",
                param="type",
                code="unknown_frame_type",
            )


def _validated(model: type[M], fields: dict[str, Any]) -> M:
    """The frame's envelope, refused as the HTTP body's fields are: a missing field, a
    value of the wrong type (``invalid_type``) or a wrong value (``invalid_value``)."""
    try:
        return model.model_validate(fields, strict=True)
    except pydantic.ValidationError as exc:
        raise invalid_request(exc) from None


def encode_error_frame(error: GatewayError, stream_id: str | None = None) -> bytes:
    """The error frame of ``error``: what its HTTP answer says, its ``Retry-After`` too,
    in lower case (the only header of an answer a client acts on after a frame), where
    each client reads it: ``error.headers`` (hosted, the ``openai`` SDK's
    ``ResponseWsError``), the frame's ``headers`` (Codex's wrapped error event)."""
    detail: dict[str, Any] = error.to_dict()
    frame: dict[str, Any] = {"type": "error", "status": error.status, "error": detail}
    retry_after = error.headers.get("Retry-After")
    if retry_after is not None:
        detail["headers"] = frame["headers"] = {"retry-after": retry_after}
    if stream_id is not None:
        frame["stream_id"] = stream_id
    return orjson.dumps(frame)


def with_stream_id(payload: bytes, stream_id: str | None) -> bytes:
    """An event's JSON (an object, as :func:`encode_event_json` writes it) with its lane
    added, without parsing it again."""
    if stream_id is None:
        return payload
    return payload[:-1] + b',"stream_id":' + orjson.dumps(stream_id) + b"}"
