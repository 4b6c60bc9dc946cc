"""What is measured: five targets, each non-stream and stream, and their request bodies.

The direct and floor targets get the Chat Completions body the gateway itself sends
upstream for ``input: "hello"`` (content parts, and ``stream_options.include_usage`` when
streaming), so the fake model does the same work behind every target and the difference
is the hop alone. The Chat Completions frontend (``gateway chat``, on the store:false
gateway, whose backend speaks Chat Completions) gets that same body: its stateless fast
path forwards it untouched, as the floor does. The Messages frontend (``gateway messages``,
on the same gateway) gets the Messages request equivalent to the Responses one: the one
user message ``hello`` (with the ``max_tokens`` the Messages API requires), so the two
frontends differ only in their wire, not in what the core does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

DIRECT = "direct"
FLOOR = "floor"
GATEWAY_STORE_FALSE = "gateway store:false"
GATEWAY_STORE_TRUE = "gateway store:true"
GATEWAY_CHAT = "gateway chat"
"""The Chat Completions frontend over a Chat Completions backend: the fast path."""
GATEWAY_MESSAGES = "gateway messages"
"""The Anthropic Messages frontend over the store:false gateway's Chat Completions backend."""
TARGETS = (
    DIRECT,
    FLOOR,
    GATEWAY_STORE_FALSE,
    GATEWAY_STORE_TRUE,
    GATEWAY_CHAT,
    GATEWAY_MESSAGES,
)
GATEWAYS = (GATEWAY_STORE_FALSE, GATEWAY_STORE_TRUE, GATEWAY_CHAT, GATEWAY_MESSAGES)
MODES = (False, True)
"""``stream`` off, then on."""

CHAT_PATH = "/v1/chat/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
MESSAGES_MAX_TOKENS = 1024
"""Required by the Messages API; far above the answer, so it cuts nothing."""
EXPECTED_TEXT = "Hello! You said: hello"
_STREAM_END = {
    CHAT_PATH: b"data: [DONE]",
    RESPONSES_PATH: b"event: response.completed",
    MESSAGES_PATH: b"event: message_stop",
}
"""What only a stream that ended well holds, per path."""


@dataclass(frozen=True, slots=True)
class Scenario:
    """One target in one mode: where to POST which bytes."""

    target: str
    stream: bool
    base_url: str
    """``http://HOST:PORT`` of the server, without ``/v1``."""
    path: str
    body: bytes

    @property
    def key(self) -> str:
        return scenario_key(self.target, self.stream)

    @property
    def url(self) -> str:
        return self.base_url + self.path


def mode_name(stream: bool) -> str:
    return "stream" if stream else "non-stream"


def scenario_key(target: str, stream: bool) -> str:
    """``"gateway store:true, stream"``: how results are keyed, in JSON and tables."""
    return f"{target}, {mode_name(stream)}"


def chat_body(stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello"}]}],
    }
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return orjson.dumps(body)


def responses_body(stream: bool, store: bool, text: str = "hello") -> bytes:
    body: dict[str, Any] = {"model": "fake-model", "input": text, "store": store}
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def messages_body(stream: bool) -> bytes:
    body: dict[str, Any] = {
        "model": "fake-model",
        "max_tokens": MESSAGES_MAX_TOKENS,
        "messages": [{"role": "user", "content": "hello"}],
    }
    if stream:
        body["stream"] = True
    return orjson.dumps(body)


def scenario(target: str, stream: bool, base_url: str) -> Scenario:
    """``base_url`` is the server's ``http://HOST:PORT`` (no ``/v1``)."""
    base_url = base_url.rstrip("/").removesuffix("/v1")
    if target in (DIRECT, FLOOR, GATEWAY_CHAT):
        return Scenario(target, stream, base_url, CHAT_PATH, chat_body(stream))
    if target == GATEWAY_MESSAGES:
        return Scenario(target, stream, base_url, MESSAGES_PATH, messages_body(stream))
    store = target == GATEWAY_STORE_TRUE
    return Scenario(target, stream, base_url, RESPONSES_PATH, responses_body(stream, store))


def check_answer(scenario: Scenario, status: int, body: bytes) -> None:
    """Raise unless ``body`` is the complete, correct answer of ``scenario``."""
    problem = _problem(scenario, status, body)
    if problem:
        raise RuntimeError(f"{scenario.key}: {problem}; body starts {body[:300]!r}")


def _problem(scenario: Scenario, status: int, body: bytes) -> str | None:
    if status != 200:
        return f"status {status}"
    if scenario.stream:
        marker = _STREAM_END[scenario.path]
        return None if marker in body else f"no {marker!r} in the stream"
    answer = orjson.loads(body)
    if scenario.path == CHAT_PATH:
        text = answer["choices"][0]["message"]["content"]
    elif scenario.path == MESSAGES_PATH:
        if answer.get("stop_reason") != "end_turn":
            return f"stop_reason {answer.get('stop_reason')!r}"
        text = answer["content"][0]["text"]
    else:
        if answer.get("status") != "completed":
            return f"response status {answer.get('status')!r}"
        if answer.get("store") != (scenario.target == GATEWAY_STORE_TRUE):
            return f"store {answer.get('store')!r}"
        text = answer["output"][0]["content"][0]["text"]
    return None if text == EXPECTED_TEXT else f"text {text!r}"
