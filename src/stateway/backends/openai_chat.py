"""Backend for upstreams speaking OpenAI Chat Completions (vLLM, SGLang, llama.cpp, Ollama,
OpenAI): canonical items to ``messages`` and back.

:mod:`stateway.backends.chat_request` builds the request body;
:mod:`stateway.backends.chat_reply` reads replies as deltas; a reply or chunk that is only an
``error``, or a stream's ``error`` event (llama.cpp's error line,
:mod:`stateway.backends.sse`), is the upstream error it reports
(:func:`~stateway.backends.upstream_status.classify_reported`). A JSON reply to a
streamed request is read as a non-streamed one (an error alone, as some proxies answer).
A streamed call's name reaches the core whole, however the upstream splits or repeats it
(:mod:`stateway.backends.chat_call_names`); a custom tool's call (OpenAI's ``type:
"custom"``) as the call of the function the tool was offered as
(:mod:`stateway.backends.chat_custom_calls`). A streamed round asking for the text's tokens
with tools, which llama-server refuses streamed, is asked whole once it has refused one
(:meth:`ChatBackend._tokens_with_tools`). An assistant message of tool calls alone goes
with ``content`` null, the spec's, or as ``tool_call_content`` says; left to its default,
a backend whose server refuses null in LM Studio's words sends the call again with ``""``,
and every call after it so (:meth:`ChatBackend._null_refused`), on the fast path too (a
client's own null content, once configured or learned; a forwarded request's refusal
teaches it too: :mod:`stateway.backends.chat_forwarder`).
Item and tool types the gateway does not model cannot be carried
(``carries_unknown_types`` is False): its model is not shown them. With
``guided_decoding``, a round forcing a custom tool with a grammar is constrained by it
(:mod:`stateway.backends.guided_decoding`). A named ``tool_choice`` goes as its server
forces it: as named, or, to llama.cpp, as ``required`` over that function alone
(:mod:`stateway.backends.named_choice`). With ``think_tags``, reasoning a reply's
content holds between ``<think>`` tags is taken out of its text as reasoning
(:mod:`stateway.backends.think_tags`): such a backend is a :class:`ChatBackend`, which
forwards no Chat Completions request untouched (its answers need rewriting); any other is
an :class:`~stateway.backends.chat_forwarder.OpenAIChatBackend`, which does (the fast
path, :mod:`stateway.backends.chat_forwarder`; one whose ``tool_choice`` names
a function only to a server known to force it as named, one declaring a custom tool only
to a server known to take it: hosted OpenAI's). With ``reasoning_efforts``, an effort the
server does not take is sent at its nearest level, on the fast path too
(:mod:`stateway.backends.reasoning_efforts`), as is ``alternate_roles``' one user message
for each run of them (:mod:`stateway.backends.chat_system_messages`). With
``cache_salted`` (``cache_salt = "tenant"``) every call carries its tenant's
``cache_salt``, over a client's own and the backend's ``extra_body``; on the fast path the
core splices it into the client's body (:meth:`ForwardChat.salted_body_for
<stateway.core.commands.ForwardChat.salted_body_for>`).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping
from contextlib import aclosing
from typing import Any, Literal

import orjson

from stateway.backends.chat_call_names import CallNames
from stateway.backends.chat_custom_calls import CustomInputs
from stateway.backends.chat_reply import from_upstream_chunk, from_upstream_completion
from stateway.backends.chat_request import (
    REASONING_FIELDS,
    TEXT_PARTS,
    ToolCallContent,
    chat_body,
    to_upstream,
    with_call_content,
)
from stateway.backends.guided_decoding import GuidedDecoding, as_tool_input, guide
from stateway.backends.listed_trait import ListedTrait
from stateway.backends.model_windows import listed_windows, takes_custom_tools
from stateway.backends.named_choice import NamedChoices
from stateway.backends.reasoning_efforts import effort_levels
from stateway.backends.think_tags import TaggedReply, untagged
from stateway.backends.thinking_switch import switch_thinking, thinking_asked
from stateway.backends.tokenizer import UpstreamTokenizer
from stateway.backends.upstream_http import UpstreamClient
from stateway.backends.upstream_reply import cut_short, malformed_chunk, no_answer
from stateway.backends.upstream_status import (
    NULL_CONTENT_UNSUPPORTED,
    STREAMED_LOGPROBS_UNSUPPORTED,
    classify_event,
    classify_reported,
    reports_error,
)
from stateway.core import logprobs
from stateway.core.backend import TOOL_OUTPUT, AdvertisedWindows
from stateway.core.errors import UpstreamError, UpstreamRejected
from stateway.core.inference import (
    Answered,
    Delta,
    Finish,
    InferenceRequest,
    ToolCallDelta,
)
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES

log = logging.getLogger(__name__)

CARRIED = (
    frozenset({"message", "function_call", "function_call_output", "reasoning"})
    | REWRITTEN_ITEM_TYPES
)
"""Custom tool calls and their outputs reach the model as function calls (``model_items``)."""


class ChatBackend:
    """A Chat Completions upstream, every call translated from a round's request."""

    carried_item_types = CARRIED
    carried_part_types: Mapping[str, frozenset[str]] = {
        "user": TEXT_PARTS | {"input_image"},
        "system": TEXT_PARTS,
        "developer": TEXT_PARTS,
        "assistant": TEXT_PARTS,
        TOOL_OUTPUT: TEXT_PARTS | {"input_image"},
    }
    inlines_text_files = True
    """A Chat server takes no files: a text one goes as a text part (``chat_request``)."""
    api = "chat"
    carries_unknown_types = False
    min_output_tokens = 1

    def __init__(
        self,
        client: UpstreamClient,
        max_tokens_field: str = "max_tokens",
        guided_decoding: GuidedDecoding | None = None,
        *,
        alternate_roles: bool = False,
        reasoning_efforts: tuple[str, ...] | None = None,
        reasoning_fields: tuple[str, ...] = REASONING_FIELDS,
        tool_call_content: ToolCallContent | None = None,
        cache_salted: bool = False,
        think_tags: bool | Literal["opened"] = False,
        thinking_switch: str | None = None,
    ) -> None:
        self._client = client
        self._target = client.target
        self.name = client.target.name
        self.address = client.target.address
        self._max_tokens_field = max_tokens_field
        """``max_tokens`` (vLLM, llama.cpp, Ollama, ...) or ``max_completion_tokens`` (what
        OpenAI's reasoning models require)."""
        self._alternate = alternate_roles
        """Consecutive user messages are sent as one (strict chat templates)."""
        self._efforts = effort_levels(reasoning_efforts)
        """The level each effort the server does not take is sent at (empty: all as asked)."""
        self._reasoning_fields = reasoning_fields
        """The assistant message fields earlier reasoning is sent back in."""
        self._calls_content: ToolCallContent = (
            "null" if tool_call_content is None else tool_call_content
        )
        """The content of an assistant message of tool calls alone."""
        self._learns_content = tool_call_content is None
        """Left to its default: ``""`` from the server's refusal of null on."""
        self._null_unsettled = self._learns_content
        """Left to its default, and the server has neither answered a call sending null
        (it takes null: no call is watched for its refusal again) nor refused one."""
        self._guided = guided_decoding
        self._think_tags = bool(think_tags)
        """Reasoning in the content between ``<think>`` tags is taken out of the text."""
        self._opened = think_tags == "opened"
        """The chat template opens the block: a reply is reasoning up to ``</think>``."""
        self._switch = thinking_switch
        """The chat template's flag that turns thinking on and off, set as the client
        asked (:mod:`stateway.backends.thinking_switch`)."""
        self.cache_salted = cache_salted
        """Each call carries its tenant's ``cache_salt``."""
        self._tokenizer = UpstreamTokenizer(client)
        self._choices = NamedChoices(client)
        """How its server takes a named ``tool_choice``, once its listing told."""
        self._custom_tools = ListedTrait(client, takes_custom_tools)
        """Whether its server takes custom tools as sent (hosted OpenAI's), once its
        listing told: asked by no call, only read on the fast path."""
        self._tokens_whole = False
        """Set once the server refused ``logprobs`` with tools streamed (llama-server):
        such rounds are asked whole from then on."""

    def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        """The round's deltas; the body is built now (a request it cannot carry fails here).
        Unguided, the reply's own generator, with no layer around it (but for a streamed
        round asking for tokens with tools: :meth:`_tokens_with_tools`)."""
        body, null_content = chat_body(
            request,
            self._max_tokens_field,
            alternate_roles=self._alternate,
            efforts=self._efforts,
            reasoning_fields=self._reasoning_fields,
            tool_call_content=self._calls_content,
        )
        if self.cache_salted and request.cache_salt is not None:
            body["cache_salt"] = request.cache_salt
        if self._switch is not None:
            settings = request.settings
            asked = thinking_asked(settings.reasoning_effort, disabled=settings.reasoning_disabled)
            switch_thinking(body, self._switch, asked, self._target.extra_body)
        forced = guide(body, request, self._guided) if self._guided else None
        if body.get("logprobs") and body.get("tools") and _streamed(body):
            deltas = self._tokens_with_tools(request, body, null_content)
        else:
            deltas = self._called(request, body, null_content)
        return deltas if forced is None else _guided(deltas, forced)

    async def _tokens_with_tools(
        self, request: InferenceRequest, body: dict[str, Any], null_content: bool
    ) -> AsyncGenerator[Delta, None]:
        """A streamed round asking for the text's tokens with tools, which llama-server
        refuses streamed (a 400 before any output:
        :data:`~stateway.backends.upstream_status.STREAMED_LOGPROBS_UNSUPPORTED`) and
        answers whole: asked whole once refused, and from the start from then on. A whole
        answer gives the same deltas, at once."""
        if not self._tokens_whole:
            started = False
            try:
                async with aclosing(self._called(request, body, null_content)) as deltas:
                    async for delta in deltas:
                        started = True
                        yield delta
                return
            except UpstreamRejected as refused:
                if started or refused.code != STREAMED_LOGPROBS_UNSUPPORTED:
                    raise
                self._tokens_whole = True
        whole = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
        async with aclosing(self._called(request, whole, null_content)) as deltas:
            async for delta in deltas:
                yield delta

    def _called(
        self, request: InferenceRequest, body: dict[str, Any], null_content: bool
    ) -> AsyncGenerator[Delta, None]:
        """The call's deltas (:meth:`_deltas`); a body sending ``content`` null
        (``null_content``, as :func:`chat_body` built it: its messages are not walked
        for one) from a backend left to its default goes through :meth:`_null_refused`
        until the server has answered or refused one, and with ``""`` once it has refused
        one (a body built before)."""
        if not null_content:
            return self._deltas(request, body)
        if self._null_unsettled:
            return self._null_refused(request, body)
        if self._learns_content and self._calls_content == "":
            return self._deltas(request, _texted(body))
        return self._deltas(request, body)

    async def _null_refused(
        self, request: InferenceRequest, body: dict[str, Any]
    ) -> AsyncGenerator[Delta, None]:
        """A call sending an assistant message of tool calls alone with ``content`` null,
        which LM Studio refuses (a 400 before any output:
        :data:`~stateway.backends.upstream_status.NULL_CONTENT_UNSUPPORTED`): sent again
        once with ``""``, as every call is from then on (logged once, naming the setting
        that spares the refused call). The same deltas either way. A call answered shows
        the server takes null: no call is watched again."""
        started = False
        try:
            async with aclosing(self._deltas(request, body)) as deltas:
                async for delta in deltas:
                    if not started:
                        started = True
                        self._null_unsettled = False
                    yield delta
            return
        except UpstreamRejected as refused:
            if started or refused.code != NULL_CONTENT_UNSUPPORTED:
                raise
        self._refuses_null()
        async with aclosing(self._deltas(request, _texted(body))) as deltas:
            async for delta in deltas:
                yield delta

    def _refuses_null(self) -> None:
        """The server refused ``content`` null in LM Studio's words (a translated call's,
        or a forwarded one's: :mod:`stateway.backends.chat_forwarder`): every call goes
        with ``""`` from now on, which the log says once, naming the setting that spares
        the refused call."""
        if self._calls_content == "null":
            log.info(
                "model server %s refused content null beside tool calls; sending an empty "
                'string from now on (tool_call_content = "" sends one from the start)',
                self.name,
            )
        self._calls_content, self._null_unsettled = "", False

    async def _deltas(
        self, request: InferenceRequest, body: dict[str, Any]
    ) -> AsyncGenerator[Delta, None]:
        tokens = logprobs.INCLUDE in request.settings.include  # read only when asked for
        if isinstance(choice := body.get("tool_choice"), dict):  # a function named
            await self._choices.send(body, choice)
        body, waiting = self._target.filled(body), request.first_output
        async with self._client.post("/chat/completions", body, first_output=waiting) as reply:
            if not body.get("stream") or reply.whole:  # a prefill is asked streamed
                data = await reply.read()
                answer = self._decode_completion(data, tokens, request.answered)
                for delta in self._tagged(answer) if self._think_tags else answer:
                    yield delta
                return
            finished: bool | None = None  # None until the first delta
            answered = request.answered  # a traced attempt's: noted from the chunks
            decode = self._decoder(CustomInputs(), answered)
            if self._think_tags:
                decode = untagged(decode, opened=self._opened)
            calls: CallNames | None = None  # made at the first call fragment
            async for event in reply.events():
                if event.event == "error":  # an error line (:mod:`stateway.backends.sse`)
                    raise classify_event(event.data, self.name, self._client.scrub)
                if event.data.rstrip() == b"[DONE]":
                    if finished is None:  # vLLM's, when it drops an error before any token
                        raise no_answer(self.name)
                    finished = True
                    break
                for delta in decode(event.data, tokens):
                    finished = finished or isinstance(delta, Finish)
                    if calls is None:
                        if type(delta) is not ToolCallDelta:
                            yield delta
                            continue
                        calls = CallNames()
                    for whole in calls.feed(delta):
                        yield whole
            if calls is not None:
                for whole in calls.release():
                    yield whole
            if not finished:
                raise cut_short(self.name)

    def _decode_chunk(self, custom: CustomInputs, data: bytes, tokens: bool) -> list[Delta]:
        try:
            chunk = orjson.loads(data)
            self._check_reported(chunk, mid_stream=True)
            return from_upstream_chunk(chunk, tokens, custom)
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise malformed_chunk(self.name) from exc

    def _decoder(
        self, custom: CustomInputs, answered: Answered | None
    ) -> Callable[[bytes, bool], list[Delta]]:
        """:meth:`_decode_chunk` for one stream, whose custom calls ``custom`` reads
        (:mod:`stateway.backends.chat_custom_calls`); for a traced attempt, noting the
        ``id`` and ``model`` of the chunks in ``answered`` until both are known (each such
        chunk parsed once more). Usually the first names them; Azure OpenAI's first, of
        prompt filter results, has both empty."""
        if answered is None:
            # No frame of its own; ``custom`` given first, by position: a partial given a
            # keyword merges a dict of them at every call (a chunk: ~75 ns more, measured).
            return functools.partial(self._decode_chunk, custom)

        def decode(data: bytes, tokens: bool) -> list[Delta]:
            deltas = self._decode_chunk(custom, data, tokens)
            if answered.response_id is None or answered.model is None:
                chunk = orjson.loads(data)
                answered.note(chunk.get("id"), chunk.get("model"))
            return deltas

        return decode

    def _tagged(self, answer: Iterable[Delta]) -> list[Delta]:
        """A whole reply's deltas, its content's think tags taken out."""
        return TaggedReply(opened=self._opened).split(answer)

    def _decode_completion(
        self, data: bytes, tokens: bool, answered: Answered | None = None
    ) -> list[Delta]:
        try:
            payload = orjson.loads(data)
            self._check_reported(payload, mid_stream=False)
            if answered is not None:
                answered.note(payload.get("id"), payload.get("model"))
            return list(from_upstream_completion(payload, tokens))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
            raise UpstreamError(f"The model server '{self.name}' sent a malformed reply.") from exc

    def _check_reported(self, payload: Any, *, mid_stream: bool) -> None:
        """Raise the error a reply or chunk that is only ``{"error": ...}`` reports (some
        servers answer 200 so): :func:`classify_reported`'s rule, for both."""
        if isinstance(payload, dict) and reports_error(payload, "choices"):
            raise classify_reported(
                payload["error"], self.name, self._client.scrub, mid_stream=mid_stream
            )

    def full(self, pending: int = 0) -> bool:
        return self._client.full(pending)

    async def list_models(self) -> list[str]:
        return await self._client.list_models()

    async def advertised_windows(self) -> AdvertisedWindows:
        """The windows its listing tells, which also tells how its server takes a named
        ``tool_choice`` (:mod:`stateway.backends.named_choice`), and custom tools."""
        _, page = await self._client.model_page()
        self._choices.learn(page["data"])
        self._custom_tools.learn(page["data"])
        return await listed_windows(self._client, page["data"])

    async def count_tokens(self, request: InferenceRequest) -> int | None:
        """The upstream tokenizer's count (:mod:`stateway.backends.tokenizer`) of the
        body a call would send."""
        body = to_upstream(
            request,
            alternate_roles=self._alternate,
            reasoning_fields=self._reasoning_fields,
            tool_call_content=self._calls_content,
        )
        if isinstance(choice := body.get("tool_choice"), dict):
            await self._choices.send(body, choice)
        return await self._tokenizer.count(body)

    async def aclose(self) -> None:
        await self._client.aclose()


def _texted(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``""`` for each assistant message's null content."""
    return {**body, "messages": with_call_content(body["messages"])}


def _streamed(body: dict[str, Any]) -> bool:
    """A streamed body that may be asked whole: not a prefill to continue, which is always
    streamed (llama-server's whole answer repeats it)."""
    return bool(body.get("stream")) and "continue_final_message" not in body


async def _guided(deltas: AsyncGenerator[Delta, None], tool: str) -> AsyncGenerator[Delta, None]:
    """A guided round's deltas as the forced custom tool's call (:func:`as_tool_input`)."""
    async with aclosing(deltas) as inner:
        async for delta in as_tool_input(inner, tool):
            yield delta
