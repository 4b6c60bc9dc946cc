"""The Chat Completions fast path's backend: an :class:`OpenAIChatBackend` is a
:class:`~stateway.backends.openai_chat.ChatBackend` whose answers need no rewriting (no
``think_tags``), and so also a :class:`~stateway.core.backend.ChatForwarder`: a client's
Chat Completions request goes to it untouched where its route allows, given only what
the backend changes in every body (its ``extra_body`` fields the client did not set, an
effort at a level the server takes, the ``thinking_switch`` its effort sets, each run of
user messages made one with ``alternate_roles``), and its answer is relayed as bytes
(:mod:`stateway.backends.upstream_relay`). Whether a request naming a function in
``tool_choice``, or declaring a custom tool, may go untouched is learned from the
server's listing (:mod:`stateway.backends.named_choice`,
:mod:`stateway.backends.model_windows`).
"""

from __future__ import annotations

import itertools

import orjson

from stateway.backends.chat_system_messages import merge_user_turns
from stateway.backends.openai_chat import ChatBackend
from stateway.backends.reasoning_efforts import level_sent
from stateway.backends.thinking_switch import KWARGS, switch_thinking, thinking_asked
from stateway.backends.upstream_relay import UpstreamRelay


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

    async def forward_chat(self, body: bytes) -> UpstreamRelay:
        """The stateless fast path: ``body`` as the client sent it (given the backend's
        ``extra_body`` fields it does not set, its effort at a level the server takes, and
        with ``alternate_roles`` each run of user messages made one), the answer as
        bytes."""
        if self._target.extra_body or self._efforts or self._alternate or self._switch:
            body = self._forwarded(body)
        return await self._client.relay("/chat/completions", body)

    def _forwarded(self, body: bytes) -> bytes:
        """``body`` re-encoded with what the backend changes in it; the very bytes when
        that is nothing."""
        fields = orjson.loads(body)
        effort = fields.get("reasoning_effort")
        level = level_sent(self._efforts, effort)
        messages = fields.get("messages")
        merged = _alternated(messages) if self._alternate else messages
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
