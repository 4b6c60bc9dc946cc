"""The fake upstream as a raw ASGI app: routing, API-key check, request log, dispatch.

Routes::

    GET    /health                 {"status": "ok"}
    GET    /v1/models              the configured model names (listing.py)
    GET    /props                  llama.cpp's server properties, with --ctx-size (listing.py)
    POST   /v1/chat/completions    Chat Completions (see chat.py)
    POST   /v1/responses           stateless Responses (see responses.py)
    POST   /v1/messages            Anthropic Messages (see messages.py)
    POST   /v1/messages/count_tokens  {"input_tokens": N}, N the prompt's words
    POST   /tokenize               a tokenizer, as vLLM, llama.cpp or SGLang serve it
                                   (tokenizer.py)
    POST   /apply-template         llama.cpp's chat template rendering (tokenizer.py)
    GET    /_fake/requests         the last 200 generation requests, oldest first: each
                                   ``{"path", "body", "headers"}``, with
                                   ``"disconnected": true`` once its client left a
                                   ``[[slow]]`` answer before its end (``data``); and
                                   every generation request counted by the model it
                                   asked for, however many (``counts``)
    DELETE /_fake/requests         forget them, and zero the counts

With an API key, every ``/v1/*`` request needs ``Authorization: Bearer KEY`` or, as
Anthropic takes it, ``x-api-key: KEY``. Errors on ``/v1/messages*`` have Anthropic's shape
(:meth:`UpstreamError.anthropic_body`), ``GET /v1/models`` answers in Anthropic's shape to a
request with ``anthropic-version``, and each logged request keeps the headers that carry
the key, the Anthropic version and betas, and a test proxy's token (``headers``). With
``system_first`` the Chat wire refuses a system message anywhere but first, as strict
chat templates do; with ``text_only``, an image, as vLLM refuses one for a model that
takes none; with ``reasoning_efforts``, a ``reasoning_effort`` outside them, as
vLLM's older request model does. ``reasoning_field`` names the Chat wire's reasoning
field, as each server names it (:mod:`~stateway.fake_upstream.chat`). With
``min_output_tokens`` the Responses wire refuses a smaller ``max_output_tokens``, as
hosted OpenAI refuses one under 16 (:mod:`~stateway.fake_upstream.responses`). A window
told as vLLM tells it (``windows.max_model_len``) is kept as vLLM keeps it, whatever the
script: a longer prompt is refused in each wire's words (as ``[[context]]`` refuses it),
and on the Chat wire one that fits but not with the ``max_tokens`` asked for, in vLLM's
(its renderer's, ``windows.renderer``: the prompt counted ``at least`` one token past the
room they leave).
One told as llama.cpp tells it (``windows.ctx_size`` over ``windows.parallel`` slots) is
kept as llama-server keeps a slot's: a prompt that fills it is refused in its words, and
an answer stops (``length``) where prompt and output fill it, whatever ``max_tokens``
asked.
"""

from __future__ import annotations

import asyncio
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, Protocol

import orjson

from stateway.fake_upstream.chat import (
    ChatRequest,
    ReasoningField,
    llama_cpp_error,
    llama_cpp_refusal,
    parse_chat_request,
    unanswered,
)
from stateway.fake_upstream.conversation import Conversation
from stateway.fake_upstream.delivery import (
    END,
    Frame,
    Receive,
    Scope,
    Send,
    drop_connection,
    send_json,
    send_stream,
    until_disconnect,
)
from stateway.fake_upstream.errors import (
    UpstreamError,
    context_too_long,
    invalid_api_key,
    invalid_request,
    method_not_allowed,
    not_found,
    output_too_long,
    output_too_long_counted_in_part,
    scripted_error,
)
from stateway.fake_upstream.listing import Windows, listings
from stateway.fake_upstream.messages import (
    messages_conversation,
    parse_messages_request,
    signed_thinking,
)
from stateway.fake_upstream.messages_checks import COUNT_FIELDS, check_messages_request
from stateway.fake_upstream.misbehaviour import (
    PacedSend,
    ending_in_error,
    failing,
    huge_plan,
    leak_error,
    leaked_key_message,
    send_huge_json,
    send_text,
)
from stateway.fake_upstream.plan import Plan, build_plan
from stateway.fake_upstream.responses import parse_responses_request
from stateway.fake_upstream.script import Script, parse_script
from stateway.fake_upstream.tokenizer import (
    TEMPLATE_PATH,
    TOKENIZE_PATH,
    Dialect,
    apply_template,
    tokenize,
    unserved,
)

REQUEST_LOG_SIZE = 200
CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
LOGGED_HEADERS = frozenset(
    {b"authorization", b"x-api-key", b"anthropic-version", b"anthropic-beta", b"x-proxy-token"}
)
REQUESTS_PATH = "/_fake/requests"
_HEALTH_BODY = orjson.dumps({"status": "ok"})


class WireRequest(Protocol):
    """What the app needs from a parsed generation request, whatever its wire."""

    @property
    def stream(self) -> bool: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def conversation(self) -> Conversation: ...
    def body(self, plan: Plan) -> bytes: ...
    def frames(self, plan: Plan) -> Iterator[Frame]: ...
    def error_frame(self, message: str, sequence: int) -> bytes: ...
    def context_error(self, window: int) -> UpstreamError: ...


Parse = Callable[[dict[str, Any], Mapping[str, str]], WireRequest]
"""A wire's request parsed from its body and the headers the log keeps (the Messages wire
reads its ``anthropic-beta`` features)."""


def _body_only(parse: Callable[[dict[str, Any]], WireRequest]) -> Parse:
    """A wire whose requests say everything in their body."""

    def parsed(body: dict[str, Any], headers: Mapping[str, str]) -> WireRequest:
        return parse(body)

    return parsed


_PARSERS: dict[str, Parse] = {
    CHAT_PATH: _body_only(parse_chat_request),
    RESPONSES_PATH: _body_only(parse_responses_request),
    MESSAGES_PATH: parse_messages_request,
}


class FakeUpstreamApp:
    """A deterministic OpenAI-compatible model server, scripted by the user's text."""

    def __init__(
        self,
        api_key: str | None = None,
        model_names: list[str] | None = None,
        *,
        system_first: bool = False,
        text_only: bool = False,
        reasoning_efforts: tuple[str, ...] | None = None,
        reasoning_field: ReasoningField = "reasoning_content",
        tokenizer: Dialect = "vllm",
        windows: Windows | None = None,
        min_output_tokens: int = 1,
    ) -> None:
        self.api_key = api_key
        self.tokenizer = tokenizer
        chat = partial(
            parse_chat_request,
            system_first=system_first,
            text_only=text_only,
            reasoning_efforts=reasoning_efforts,
            reasoning_field=reasoning_field,
        )
        responses = partial(parse_responses_request, min_output_tokens=min_output_tokens)
        self._parsers = _PARSERS | {
            CHAT_PATH: _body_only(chat),
            RESPONSES_PATH: _body_only(responses),
        }
        self.model_names = list(model_names) if model_names else ["fake-model"]
        self.requests: deque[dict[str, Any]] = deque(maxlen=REQUEST_LOG_SIZE)
        self.counts: Counter[str] = Counter()
        """Generation requests by the model they asked for, unbounded unlike the log."""
        windows = windows or Windows()
        self._window = windows.max_model_len
        """The window kept as vLLM keeps it (``--max-model-len``), whatever the script."""
        self._renderer = windows.renderer
        """... as its renderer does (``--vllm-renderer``)."""
        self._slot = windows.slot
        """The window kept as llama-server keeps one slot's (``--ctx-size`` over
        ``--parallel``), whatever the script."""
        self._models_body, self._anthropic_models_body = listings(self.model_names, windows)
        self._props_body = windows.props()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            try:
                await self._http(scope, receive, send)
            except UpstreamError as error:
                anthropic = scope["path"].startswith(MESSAGES_PATH)
                body = error.anthropic_body() if anthropic else error.body()
                await send_json(send, error.sent_status, body, error.headers)
        elif scope["type"] == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        if len(path) > 1:
            path = path.rstrip("/")
        if self.api_key is not None and path.startswith("/v1/"):
            self._check_api_key(scope)
        parse = self._parsers.get(path)
        if parse is not None:
            if method != "POST":
                raise method_not_allowed(method, path)
            await self._generate(path, parse, scope, receive, send)
        elif path == COUNT_TOKENS_PATH and method == "POST":
            await self._count_tokens(scope, receive, send)
        elif path == "/v1/models" and method == "GET":
            anthropic = _header(scope, b"anthropic-version") is not None
            await send_json(
                send, 200, self._anthropic_models_body if anthropic else self._models_body
            )
        elif path in (TOKENIZE_PATH, TEMPLATE_PATH) and self._serves(path):
            if method != "POST":
                raise method_not_allowed(method, path)
            body = await _read_json(receive)
            if body is None:
                return
            if self.tokenizer == "lmstudio":
                answer = unserved(method, path)
            elif path == TOKENIZE_PATH:
                answer = tokenize(self.tokenizer, body)
            else:
                answer = apply_template(body)
            await send_json(send, 200, orjson.dumps(answer))
        elif path == "/health" and method == "GET":
            await send_json(send, 200, _HEALTH_BODY)
        elif path == "/props" and method == "GET" and self._props_body is not None:
            await send_json(send, 200, self._props_body)
        elif path == REQUESTS_PATH and method == "GET":
            logged = {"data": list(self.requests), "counts": self.counts}
            await send_json(send, 200, orjson.dumps(logged))
        elif path == REQUESTS_PATH and method == "DELETE":
            self.requests.clear()
            self.counts.clear()
            await send_json(send, 200, orjson.dumps({"data": [], "counts": {}}))
        elif path in ("/v1/models", "/health", REQUESTS_PATH, COUNT_TOKENS_PATH):
            raise method_not_allowed(method, path)
        else:
            raise not_found(method, path)

    def _serves(self, path: str) -> bool:
        """Whether this fake's tokenizer dialect has ``path``."""
        if self.tokenizer == "none":
            return False
        return path == TOKENIZE_PATH or self.tokenizer in ("llama.cpp", "lmstudio")

    def _check_api_key(self, scope: Scope) -> None:
        token = _presented_key(scope)
        if token == self.api_key:
            return
        raise invalid_api_key(provided=token is not None)

    async def _generate(
        self,
        path: str,
        parse: Parse,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        key = _presented_key(scope)
        body = await _read_json(receive)
        if body is None:
            return  # the client left before sending its whole request
        logged: dict[str, Any] = {"path": path, "body": body, "headers": _logged_headers(scope)}
        self.requests.append(logged)
        self.counts[str(body.get("model"))] += 1
        request = parse(body, logged["headers"])
        if self._window is not None:
            _check_window(request, self._window, self._renderer)
        room = None if self._slot is None else _slot_room(request, self._slot)
        script = parse_script(request.conversation.user_text).for_model(body.get("model"))
        if script.stall_ms or script.trickle_ms:
            stall, trickle = (script.stall_ms or 0) / 1000, (script.trickle_ms or 0) / 1000
            send = PacedSend(send, stall=stall, trickle=trickle).send
        answer = _answer(request, script, key, receive, send, room)
        try:
            if script.waits:
                await until_disconnect(receive, answer, lambda: logged.update(disconnected=True))
            else:
                await answer
        except UpstreamError as error:
            if script.reported:
                error.sent_status = 200
            raise

    async def _count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_json(receive)
        if body is None:
            return
        self.requests.append(
            {"path": COUNT_TOKENS_PATH, "body": body, "headers": _logged_headers(scope)}
        )
        check_messages_request(body, signed_thinking, fields=COUNT_FIELDS)
        conversation = messages_conversation(body)
        await send_json(send, 200, orjson.dumps({"input_tokens": conversation.prompt_tokens}))


def _slot_room(request: WireRequest, slot: int) -> int:
    """The output tokens a slot of ``slot`` tokens has room for beside the prompt, which
    llama-server generates at most whatever ``max_tokens`` asks (and then finishes with
    ``length``); a prompt that fills the slot is refused in llama-server's words (in each
    wire's on the others)."""
    prompt = request.conversation.prompt_tokens
    if prompt >= slot:
        if isinstance(request, ChatRequest):
            raise context_too_long(prompt, slot, "llama.cpp")
        raise request.context_error(slot)
    return slot - prompt


def _check_window(request: WireRequest, window: int, renderer: bool = False) -> None:
    """Refuse a prompt longer than ``window`` in the wire's words, and on the Chat wire, as
    vLLM, one that fits but not with the output tokens asked for (as its ``renderer``
    does: counted only as far as their room)."""
    prompt = request.conversation.prompt_tokens
    if prompt > window:
        raise request.context_error(window)
    asked = request.max_tokens
    if isinstance(request, ChatRequest) and asked is not None and prompt + asked > window:
        if renderer:
            raise output_too_long_counted_in_part(asked, window)
        raise output_too_long(prompt, asked, window)


async def _answer(
    request: WireRequest,
    script: Script,
    key: str | None,
    receive: Receive,
    send: Send,
    room: int | None = None,
) -> None:
    """Play the script: error, drop, or the planned answer, paced by ``[[slow]]``;
    ``room``: the output tokens the window leaves, whatever ``max_tokens`` asks."""
    if script.silence_ms:
        await asyncio.sleep(script.silence_ms / 1000)
    delay = (script.slow_ms or 0) / 1000
    if delay and (script.error is not None or not request.stream):
        await asyncio.sleep(delay)
    if script.leak == "json":
        raise leak_error(key, script.error or 400)
    if script.leak == "text":
        await send_text(send, script.error or 400, leaked_key_message(key))
        return
    if script.error is not None:
        raise scripted_error(script.error)
    if script.context is not None and request.conversation.prompt_tokens > script.context:
        if script.llamacpp and isinstance(request, ChatRequest):
            if request.stream:
                await send_stream(send, receive, llama_cpp_refusal(), delay=0.0, cut=None)
                return
            raise context_too_long(request.conversation.prompt_tokens, script.context, "llama.cpp")
        raise request.context_error(script.context)
    asked = request.max_tokens
    limit = asked if room is None else min(room, asked or room)
    plan = build_plan(request.conversation, script, limit)
    if script.finish is not None and isinstance(request, ChatRequest):
        plan = replace(plan, finish_reason=script.finish)
    if script.huge is not None:
        plan = huge_plan(plan, script.huge, request.stream)
    if request.stream:
        frames: Iterable[Frame] = request.frames(plan)
        if script.leak == "stream":
            message = leaked_key_message(key)
            frames = ending_in_error(frames, lambda sent: request.error_frame(message, sent))
        if script.fail is not None:
            frames = failing(frames, script.fail, partial(_failure, request, script))
        if script.unanswered and isinstance(request, ChatRequest):
            frames = unanswered()
        if script.truncate is not None:
            frames = failing(frames, script.truncate, lambda sent: ())
        late, pause = (script.late_ms or 0) / 1000, (script.pause_ms or 0) / 1000
        await send_stream(
            send, receive, frames, delay=delay, cut=script.cut, late=late, pause=pause
        )
    elif script.cut is not None:
        await drop_connection(send, receive)
    elif script.huge is not None:
        await send_huge_json(send, request.body(plan), script.huge)
    else:
        await send_json(send, 200, request.body(plan))


FAILED_MID_STREAM = "Scripted failure mid-stream: [[fail]]"


def _failure(request: WireRequest, script: Script, sent: int) -> list[Frame]:
    """The error event ending a ``[[fail]]`` stream after ``sent`` frames."""
    if script.llamacpp and isinstance(request, ChatRequest):
        return llama_cpp_error({"code": 500, "message": FAILED_MID_STREAM, "type": "server_error"})
    return [(request.error_frame(FAILED_MID_STREAM, sent), END)]


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _logged_headers(scope: Scope) -> dict[str, str]:
    return {
        key.decode(): value.decode("latin-1")
        for key, value in scope["headers"]
        if key in LOGGED_HEADERS
    }


def _presented_key(scope: Scope) -> str | None:
    """The key the request presents: ``x-api-key`` (Anthropic's way), else the bearer token."""
    return _header(scope, b"x-api-key") or _bearer(scope)


def _bearer(scope: Scope) -> str | None:
    """The bearer token the request presents, if any."""
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" else ""
    return None


async def _read_json(receive: Receive) -> dict[str, Any] | None:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    try:
        body = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise invalid_request(f"We could not parse the JSON body of your request: {exc}") from exc
    if not isinstance(body, dict):
        raise invalid_request("The request body must be a JSON object.")
    return body


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def build_app(
    api_key: str | None = None,
    model_names: list[str] | None = None,
    *,
    system_first: bool = False,
    text_only: bool = False,
    reasoning_efforts: tuple[str, ...] | None = None,
    reasoning_field: ReasoningField = "reasoning_content",
    tokenizer: Dialect = "vllm",
    windows: Windows | None = None,
    min_output_tokens: int = 1,
) -> FakeUpstreamApp:
    """A fresh fake upstream ASGI app (each with its own request log)."""
    return FakeUpstreamApp(
        api_key,
        model_names,
        system_first=system_first,
        text_only=text_only,
        reasoning_efforts=reasoning_efforts,
        reasoning_field=reasoning_field,
        tokenizer=tokenizer,
        windows=windows,
        min_output_tokens=min_output_tokens,
    )
