"""The fake upstream as a raw ASGI app: routing, API-key check, request log, dispatch
(a generation request's answer: :mod:`~stateway.fake_upstream.answer`).

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
the key, the Anthropic version and betas, a test proxy's token and the trace context
(``headers``). With ``system_first`` the Chat wire refuses a system message anywhere but
first, as strict chat templates do; with ``text_only``, an image, as vLLM refuses one for
a model that takes none; with ``content_required``, a message whose content is null, as LM
Studio refuses one; with ``reasoning_efforts``, a ``reasoning_effort`` outside them, as
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
asked. The Chat wire takes tools as the server its window plays takes them: a ``custom``
tool only without one (as OpenAI; :mod:`~stateway.fake_upstream.chat_tools`).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import orjson

from stateway.fake_upstream.answer import WireRequest, answer, check_window, slot_room
from stateway.fake_upstream.chat import ReasoningField, parse_chat_request
from stateway.fake_upstream.delivery import Receive, Scope, Send, send_json, until_disconnect
from stateway.fake_upstream.errors import (
    UpstreamError,
    invalid_api_key,
    method_not_allowed,
    not_found,
)
from stateway.fake_upstream.intake import header, logged_headers, presented_key, read_json
from stateway.fake_upstream.listing import Windows, listings
from stateway.fake_upstream.messages import (
    messages_conversation,
    parse_messages_request,
    signed_thinking,
)
from stateway.fake_upstream.messages_checks import COUNT_FIELDS, check_messages_request
from stateway.fake_upstream.misbehaviour import PacedSend
from stateway.fake_upstream.responses import parse_responses_request
from stateway.fake_upstream.script import parse_script
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
REQUESTS_PATH = "/_fake/requests"
_HEALTH_BODY = orjson.dumps({"status": "ok"})


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
        content_required: bool = False,
        reasoning_efforts: tuple[str, ...] | None = None,
        reasoning_field: ReasoningField = "reasoning_content",
        tokenizer: Dialect = "vllm",
        windows: Windows | None = None,
        min_output_tokens: int = 1,
    ) -> None:
        self.api_key = api_key
        self.tokenizer = tokenizer
        windows = windows or Windows()
        chat = partial(
            parse_chat_request,
            system_first=system_first,
            text_only=text_only,
            content_required=content_required,
            reasoning_efforts=reasoning_efforts,
            reasoning_field=reasoning_field,
            tool_server=windows.server,
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
            anthropic = header(scope, b"anthropic-version") is not None
            await send_json(
                send, 200, self._anthropic_models_body if anthropic else self._models_body
            )
        elif path in (TOKENIZE_PATH, TEMPLATE_PATH) and self._serves(path):
            if method != "POST":
                raise method_not_allowed(method, path)
            body = await read_json(receive)
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
        token = presented_key(scope)
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
        key = presented_key(scope)
        body = await read_json(receive)
        if body is None:
            return  # the client left before sending its whole request
        logged: dict[str, Any] = {"path": path, "body": body, "headers": logged_headers(scope)}
        self.requests.append(logged)
        self.counts[str(body.get("model"))] += 1
        request = parse(body, logged["headers"])
        if self._window is not None:
            check_window(request, self._window, self._renderer)
        room = None if self._slot is None else slot_room(request, self._slot)
        script = parse_script(request.conversation.user_text).for_model(body.get("model"))
        if script.stall_ms or script.trickle_ms:
            stall, trickle = (script.stall_ms or 0) / 1000, (script.trickle_ms or 0) / 1000
            send = PacedSend(send, stall=stall, trickle=trickle).send
        answering = answer(request, script, key, receive, send, room)
        try:
            if script.waits:
                await until_disconnect(receive, answering, lambda: logged.update(disconnected=True))
            else:
                await answering
        except UpstreamError as error:
            if script.reported:
                error.sent_status = 200
            raise

    async def _count_tokens(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await read_json(receive)
        if body is None:
            return
        self.requests.append(
            {"path": COUNT_TOKENS_PATH, "body": body, "headers": logged_headers(scope)}
        )
        check_messages_request(body, signed_thinking, fields=COUNT_FIELDS)
        conversation = messages_conversation(body)
        await send_json(send, 200, orjson.dumps({"input_tokens": conversation.prompt_tokens}))


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
    content_required: bool = False,
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
        content_required=content_required,
        reasoning_efforts=reasoning_efforts,
        reasoning_field=reasoning_field,
        tokenizer=tokenizer,
        windows=windows,
        min_output_tokens=min_output_tokens,
    )
