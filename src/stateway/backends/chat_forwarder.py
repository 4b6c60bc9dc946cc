"""The Chat Completions fast path's backend: an :class:`OpenAIChatBackend` is a
:class:`~stateway.backends.openai_chat.ChatBackend` whose answers need no rewriting (no
``think_tags``), and so also a :class:`~stateway.core.backend.ChatForwarder`: a client's
Chat Completions request goes to it untouched where its route allows, given only what
the backend changes in every body (its ``extra_body`` fields the client did not set, an
effort at a level the server takes, the ``thinking_switch`` its effort sets, each run of
user messages made one with ``alternate_roles``, ``""`` for an assistant message's null
content where the backend sends that, configured or learned: ``tool_call_content``), and
its answer is relayed as bytes
(:mod:`stateway.backends.upstream_relay`). A backend left to its default learns ``""``
from a forwarded request too: LM Studio's refusal of a client's own null content (a 400,
before any output) is sent again once with ``""``, its answer the client's
(:meth:`OpenAIChatBackend._refused_null`). Whether a request naming a function in
``tool_choice``, or declaring a custom tool, may go untouched is learned from the
server's listing (:mod:`stateway.backends.named_choice`,
:mod:`stateway.backends.model_windows`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any

import orjson

from stateway.backends.chat_request import with_call_content
from stateway.backends.chat_system_messages import merge_user_turns
from stateway.backends.openai_chat import ChatBackend
from stateway.backends.read_relay import ReadRelay
from stateway.backends.reasoning_efforts import level_sent
from stateway.backends.thinking_switch import KWARGS, switch_thinking, thinking_asked
from stateway.backends.upstream_relay import UpstreamRelay
from stateway.backends.upstream_status import NULL_CONTENT_UNSUPPORTED, parse_error
from stateway.core.backend import is_event_stream


class OpenAIChatBackend(ChatBackend):
    """A Chat Completions upstream whose answers need no rewriting (no ``think_tags``):
    also a :class:`~stateway.core.backend.ChatForwarder`, a Chat Completions request going
    to it untouched where its route allows (the fast path)."""

    @property
    def takes_named_choice(self) -> bool:
        """Whether its server is known to force a named ``tool_choice`` as sent: else a
        request naming a function is translated, not forwarded, so that :meth:`infer`
        sends the choice as the server takes it."""
        return self._choices.taken is True

    @property
    def takes_custom_tools(self) -> bool:
        """Whether its server is known to take custom tools (and a ``custom`` or
        ``allowed_tools`` choice) as sent: else a request declaring one is translated,
        the tool offered as a function."""
        return self._custom_tools.known is True

    async def forward_chat(
        self, body: bytes, fields: Mapping[str, Any]
    ) -> UpstreamRelay | ReadRelay:
        """The stateless fast path: ``body`` as the client sent it (given the backend's
        ``extra_body`` fields it does not set, its effort at a level the server takes,
        with ``alternate_roles`` each run of user messages made one, and ``""`` for an
        assistant message's null content when the backend sends that: a client's own
        message of tool calls alone, which LM Studio refuses), the answer as bytes.
        ``fields``: ``body`` parsed, whose messages are looked through for null content
        only by a backend sending ``""``, or on a 400 (:meth:`_refused_null`)."""
        texted = self._calls_content == "" and _null_content(fields.get("messages"))
        sent = body
        if texted or self._target.extra_body or self._efforts or self._alternate or self._switch:
            sent = self._forwarded(body, texted=texted)
        relay = await self._client.relay("/chat/completions", sent)
        if relay.status != 400 or texted or not self._watches_null:
            return relay
        return await self._refused_null(relay, body, fields)

    @property
    def _watches_null(self) -> bool:
        """Whether a forwarded request's 400 may be LM Studio's refusal of null content:
        the backend is left to its default, and its server has not answered a translated
        call sending null (:meth:`ChatBackend._null_refused`), or has refused one already
        (a request forwarded with null before it did)."""
        return self._null_unsettled or (self._learns_content and self._calls_content == "")

    async def _refused_null(
        self, relay: UpstreamRelay, body: bytes, fields: Mapping[str, Any]
    ) -> UpstreamRelay | ReadRelay:
        """A 400 to ``body``, forwarded by a backend watching for LM Studio's refusal
        (:attr:`_watches_null`): when ``body`` holds an assistant message whose content
        is null, as it came, and the answer is that refusal (its words, told as a
        translated call's refusal is:
        :func:`~stateway.backends.upstream_status.parse_error`), the backend learns
        ``""`` (:meth:`ChatBackend._refuses_null`) and the request goes again once so,
        its answer relayed instead (nothing of the refusal went out: its status line
        waits for its body). Any other 400 is relayed as it came, an event stream at
        once, any other body read first (:class:`ReadRelay`)."""
        if is_event_stream(relay.headers) or not _null_content(fields.get("messages")):
            return relay
        read = await ReadRelay.of(relay)
        if parse_error(await read.body())[1] != NULL_CONTENT_UNSUPPORTED:
            return read
        await relay.aclose()
        self._refuses_null()
        return await self._client.relay("/chat/completions", self._forwarded(body, texted=True))

    def _forwarded(self, body: bytes, *, texted: bool) -> bytes:
        """``body`` re-encoded with what the backend changes in it (``texted``: its
        assistant messages' null content made ``""``); the very bytes when that is
        nothing."""
        fields = orjson.loads(body)
        effort = fields.get("reasoning_effort")
        level = level_sent(self._efforts, effort)
        messages = fields.get("messages")
        merged = with_call_content(messages) if texted else messages
        if self._alternate:
            merged = _alternated(merged)
        flags = fields.get(KWARGS)
        if self._switch is not None:
            switch_thinking(fields, self._switch, thinking_asked(effort), self._target.extra_body)
        switched = fields.get(KWARGS) is not flags
        if level == effort and merged is messages and not switched and not self._target.extra_body:
            return body
        if level != effort:
            fields["reasoning_effort"] = level
        if merged is not messages:
            fields["messages"] = merged
        return orjson.dumps(self._target.filled(fields))


def _null_content(messages: object) -> bool:
    """Whether a fast-path body's ``messages`` hold an assistant message whose content is
    null (or absent: the spec's for one of tool calls alone); malformed ones are the
    upstream's to judge."""
    if type(messages) is not list:
        return False
    for message in messages:  # content first: null is rare, and ends most tests at once
        if (
            type(message) is dict
            and message.get("content") is None
            and message.get("role") == "assistant"
        ):
            return True
    return False


def _alternated(messages: object) -> object:
    """A fast-path body's ``messages`` with each run of user messages made one; the very
    list when it has no such run, or when they are malformed (the upstream judges them)."""
    if not isinstance(messages, list) or not all(_well_formed(m) for m in messages):
        return messages
    roles = [m["role"] for m in messages]
    if not any(a == b == "user" for a, b in itertools.pairwise(roles)):
        return messages
    return merge_user_turns(messages)


def _well_formed(message: object) -> bool:
    """A message :func:`merge_user_turns` can take: a role, and a user's content text or
    parts."""
    if not isinstance(message, dict) or "role" not in message:
        return False
    return message["role"] != "user" or isinstance(message.get("content"), str | list)
