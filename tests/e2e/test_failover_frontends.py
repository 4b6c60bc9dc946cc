"""Failover through every frontend, end to end: the real ``stateway serve`` in front of two
fake model servers, each case its own two-candidate route (so one case's failures never
open another's circuit), asked over raw HTTP so each frontend's exact wire is checked.

The first candidate refuses the connection, answers 500, 429 or 503 (or a 503's error in a
200 JSON body, to a streamed request too, on each upstream wire), stays silent past its
``first_byte_timeout``, refuses a prompt too long for its context, or opens its answer (or
a tool call, without its arguments) and fails before the first token: the second
candidate answers, in one stream, and the client sees nothing of the first. A refusal of
the request in a 200 JSON body is not retried: the client gets it, a 400. A first
candidate cut after some output is not retried: the stream ends in the frontend's own
error shape (Responses ``response.failed``, a Chat ``data: {"error": ...}`` line without
``[DONE]``, a Messages ``event: error`` without ``message_stop``). A Chat Completions
request to a two-candidate route is translated (the fast path relays one candidate only).
"""

from __future__ import annotations

import json
import re
import sqlite3
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest

from tests.e2e.configured import RunningGateway
from tests.e2e.routing import dead_url, fake_requests, routed_gateway

FRONTENDS = ("responses", "chat", "messages")
LATE = 0.5
"""``first_byte_timeout`` (and ``read_timeout``) of the first candidates."""
FAILING_OVER = {
    "refused": "",
    "500": "[[error:500]]",
    "429": "[[error:429]]",
    "503": "[[error:503]]",
    "late": "[[silence:5000]]",
    "too-long": "[[context:1]]",
    "reported": "[[error:503]] [[reported]]",
}
"""What the first candidate does (scripted for its model only): the second answers."""
OPENED = ("responses", "anthropic")
"""Upstream wires that open an answer before its first token (``output_item.added``,
``content_block_start``): a cut right after that is still before any output."""
WIRES = ("chat", *OPENED)
REJECTED = "[[error:400]] [[reported]]"
"""A refusal of the request itself, in a 200 JSON body (to a streamed request too, as some
proxies answer): not retried, the client's own error."""
CUT = "[[words:8]] [[cut:2]] [[slow:30]]"
"""Two words, then the connection dropped (paced, so the two reach the client apart)."""


def route_name(first: str, case: str, frontend: str, stream: bool) -> str:
    return f"{first}-{case}-{frontend}-{'stream' if stream else 'json'}"


def failover_config(first_upstream: str, second_upstream: str) -> str:
    """Backends ``a-<wire>`` (the first fake, strict deadlines), ``b`` and ``dead``; a
    route per case whose candidates ask for models ``<route>-a`` and ``<route>-b``; and
    ``solo``, ``a-chat`` alone (the Chat Completions fast path)."""
    text = "[health]\nfailure_threshold = 1000\ncooldown = 60.0\n"
    for api in ("chat", *OPENED):
        text += f'[[backends]]\nname = "a-{api}"\nurl = "{first_upstream}"\napi = "{api}"\n'
        text += f"first_byte_timeout = {LATE}\nread_timeout = {LATE}\n"
    text += f'[[backends]]\nname = "b"\nurl = "{second_upstream}"\n'
    text += f'[[backends]]\nname = "dead"\nurl = "{dead_url()}"\nconnect_timeout = 2\n'
    cases = [("chat", case) for case in (*FAILING_OVER, "cut")]
    cases += [(api, "opened") for api in OPENED]
    cases += [(api, "reported") for api in OPENED]
    cases += [(api, "rejected") for api in WIRES]
    cases += [("chat", "called")]
    for api, case in cases:
        first = "dead" if case == "refused" else f"a-{api}"
        for frontend in FRONTENDS:
            for stream in (False, True):
                name = route_name(api, case, frontend, stream)
                text += f'[[routes]]\nname = "{name}"\n'
                text += f'[[routes.candidates]]\nbackend = "{first}"\nmodel = "{name}-a"\n'
                text += f'[[routes.candidates]]\nbackend = "b"\nmodel = "{name}-b"\n'
                text += "priority = 1\n"
    text += '[[routes]]\nname = "solo"\n[[routes.candidates]]\nbackend = "a-chat"\n'
    return text + 'model = "solo-a"\n'


@pytest.fixture(scope="module")
def gateway(
    fake_upstream: str, second_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    text = failover_config(fake_upstream, second_upstream)
    with routed_gateway(tmp_path_factory.mktemp("failover"), text) as running:
        yield running


@dataclass(frozen=True)
class Answer:
    status: int
    body: str

    def events(self) -> list[tuple[str | None, Any]]:
        """An event stream's events: (``event:`` name or None, ``data:`` parsed, or
        ``"[DONE]"``)."""
        events: list[tuple[str | None, Any]] = []
        for block in self.body.split("\n\n"):
            name, data = None, None
            for line in block.splitlines():
                if line.startswith("event: "):
                    name = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    data = line.removeprefix("data: ")
            if data is not None:
                events.append((name, data if data == "[DONE]" else json.loads(data)))
        return events

    def json(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(self.body)
        return answer


def ask(gateway: RunningGateway, frontend: str, model: str, text: str, stream: bool) -> Answer:
    messages = [{"role": "user", "content": text}]
    match frontend:
        case "responses":
            path, body = "/v1/responses", {"model": model, "input": text}
        case "chat":
            path, body = "/v1/chat/completions", {"model": model, "messages": messages}
        case _:
            path, body = "/v1/messages", {"model": model, "messages": messages, "max_tokens": 64}
    request = urllib.request.Request(
        gateway.url + path,
        data=json.dumps({**body, "stream": stream}).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return Answer(reply.status, reply.read().decode())
    except urllib.error.HTTPError as error:
        with error:
            return Answer(error.code, error.read().decode())


def shown_text(frontend: str, answer: Answer, stream: bool) -> str:
    """The answer's text as its client reads it."""
    if not stream:
        body = answer.json()
        match frontend:
            case "responses":
                return "".join(
                    part["text"] for item in body["output"] for part in item.get("content", [])
                )
            case "chat":
                return str(body["choices"][0]["message"]["content"])
            case _:
                return "".join(block["text"] for block in body["content"])
    events = [data for _, data in answer.events() if data != "[DONE]"]
    match frontend:
        case "responses":
            kind = "response.output_text.delta"
            return "".join(e["delta"] for e in events if e["type"] == kind)
        case "chat":
            choices = [choice for e in events for choice in e.get("choices", [])]
            return "".join(c["delta"].get("content") or "" for c in choices)
        case _:
            deltas = [e["delta"] for e in events if e["type"] == "content_block_delta"]
            return "".join(d.get("text", "") for d in deltas)


def assert_streamed_whole(frontend: str, answer: Answer) -> None:
    """One stream, begun once and ended as a success, with no error in it, and nothing of
    a failed attempt's (held) opening in it: the Responses sequence numbers and Messages
    content block indexes run without a gap."""
    events = answer.events()
    kinds = [data if data == "[DONE]" else data.get("type") for _, data in events]
    match frontend:
        case "responses":
            assert kinds.count("response.created") == 1
            assert kinds[-1] == "response.completed"
            numbers = [data["sequence_number"] for _, data in events]
            assert numbers == list(range(len(events)))
        case "chat":
            assert kinds[-1] == "[DONE]"
            assert not any("error" in data for _, data in events if data != "[DONE]")
        case _:
            assert kinds.count("message_start") == 1
            assert kinds[-1] == "message_stop"
            assert "error" not in kinds
            started = [data["index"] for _, data in events if data["type"] == "content_block_start"]
            stopped = [data["index"] for _, data in events if data["type"] == "content_block_stop"]
            assert started == stopped == list(range(len(started)))


def marker() -> str:
    return uuid.uuid4().hex[:12]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize(
    ("wire", "case"),
    [
        *(("chat", case) for case in FAILING_OVER),
        *((api, "opened") for api in OPENED),
        *((api, "reported") for api in OPENED),
    ],
)
def test_a_failure_before_output_fails_over_unseen(
    gateway: RunningGateway,
    fake_upstream: str,
    second_upstream: str,
    wire: str,
    case: str,
    frontend: str,
    stream: bool,
) -> None:
    route = route_name(wire, case, frontend, stream)
    mark = marker()
    script = "[[cut:0]]" if case == "opened" else FAILING_OVER[case]
    answer = ask(gateway, frontend, route, f"{mark} {script} [[only:{route}-a]]", stream)
    assert answer.status == 200, answer.body
    assert shown_text(frontend, answer, stream) == f"Hello! You said: {mark}"
    if stream:
        assert_streamed_whole(frontend, answer)
    tried = len(fake_requests(fake_upstream, mark))
    if case == "refused":
        assert tried == 0
    elif case == "opened" and not stream:  # dropped before a byte: sent again if the
        assert tried in (1, 2)  # connection was a reused one (it may have been stale)
    else:
        assert tried == 1
    [served] = fake_requests(second_upstream, mark)
    assert served["body"]["model"] == f"{route}-b"
    if frontend == "responses":
        response_id = _created(answer) if stream else answer.json()["id"]
        attempts = gateway.stored(response_id)["attempts"]
        outcomes = [(x["backend"], x["outcome"]) for x in attempts]
        assert outcomes == [("dead" if case == "refused" else f"a-{wire}", "failed"), ("b", "ok")]
        assert served_by(gateway, response_id) == f"b/{route}-b"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("frontend", FRONTENDS)
@pytest.mark.parametrize("wire", WIRES)
def test_a_refusal_in_a_200_json_body_is_the_clients_error_not_retried(
    gateway: RunningGateway,
    fake_upstream: str,
    second_upstream: str,
    wire: str,
    frontend: str,
    stream: bool,
) -> None:
    """Classified as the same body answering a non-streamed request, before any output:
    a 400 in the frontend's error shape (a streamed request's status line is held until
    output), the second candidate never asked; not a 502 stream cut, nor an empty answer."""
    route = route_name(wire, "rejected", frontend, stream)
    mark = marker()
    answer = ask(gateway, frontend, route, f"{mark} {REJECTED} [[only:{route}-a]]", stream)
    assert answer.status == 400, answer.body
    body = answer.json()
    if frontend == "messages":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        said = body["error"]["message"]
    else:
        assert body["error"]["type"] == "invalid_request_error"
        assert body["error"]["code"] == "upstream_rejected"
        said = body["error"]["message"]
    assert said.startswith(f"Model server 'a-{wire}' answered with an error: Scripted failure")
    assert len(fake_requests(fake_upstream, mark)) == 1
    assert fake_requests(second_upstream, mark) == []


CALLED = '[[tool:lookup:{"q":1}]] [[cut:0]]'
"""A tool call's opening fragment (its id and name), then the connection dropped before
its first argument."""


def called(frontend: str, answer: Answer) -> list[tuple[str, str]]:
    """The tool calls a stream shows: (name, arguments), each call once."""
    events = [data for _, data in answer.events() if data != "[DONE]"]
    calls: dict[int, list[str]] = {}
    for event in events:
        match frontend:
            case "responses":
                item = event.get("item", {})
                if event["type"] == "response.output_item.done" and item["type"] == "function_call":
                    calls[event["output_index"]] = [item["name"], item["arguments"]]
            case "chat":
                for choice in event.get("choices", []):
                    for fragment in choice["delta"].get("tool_calls") or []:
                        call = calls.setdefault(fragment["index"], ["", ""])
                        call[0] += fragment.get("function", {}).get("name") or ""
                        call[1] += fragment.get("function", {}).get("arguments") or ""
            case _:
                if event["type"] == "content_block_start":
                    if event["content_block"]["type"] == "tool_use":
                        calls[event["index"]] = [event["content_block"]["name"], ""]
                elif event["type"] == "content_block_delta" and event["index"] in calls:
                    calls[event["index"]][1] += event["delta"].get("partial_json", "")
    return [(name, arguments) for name, arguments in calls.values()]


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_call_named_then_cut_before_its_arguments_fails_over_unseen(
    gateway: RunningGateway, fake_upstream: str, second_upstream: str, frontend: str
) -> None:
    """A streamed tool call's first fragment (id and name, no arguments: as vLLM opens
    one) is no output yet: the first candidate dropping right after it is retried on the
    second, and the client sees that one's call only, once."""
    route = route_name("chat", "called", frontend, True)
    mark = marker()
    answer = ask(gateway, frontend, route, f"{mark} {CALLED} [[only:{route}-a]]", True)
    assert answer.status == 200, answer.body
    assert_streamed_whole(frontend, answer)
    assert [(name, json.loads(arguments)) for name, arguments in called(frontend, answer)] == [
        ("lookup", {"q": 1})
    ]
    assert len(fake_requests(fake_upstream, mark)) == 1
    [served] = fake_requests(second_upstream, mark)
    assert served["body"]["model"] == f"{route}-b"


def _created(answer: Answer) -> str:
    return str(answer.events()[0][1]["response"]["id"])


def served_by(gateway: RunningGateway, response_id: str) -> str | None:
    """The candidate stored as the one that served a response (what a continuation after
    a restart prefers)."""
    with sqlite3.connect(gateway.database) as db:
        row = db.execute("SELECT served_by FROM responses WHERE id = ?", (response_id,)).fetchone()
    assert row is not None
    return cast(str | None, row[0])


@pytest.mark.parametrize("frontend", FRONTENDS)
def test_a_cut_after_output_is_not_retried_and_ends_in_the_frontends_error(
    gateway: RunningGateway, fake_upstream: str, second_upstream: str, frontend: str
) -> None:
    route = route_name("chat", "cut", frontend, True)
    mark = marker()
    answer = ask(gateway, frontend, route, f"{mark} {CUT} [[only:{route}-a]]", True)
    assert answer.status == 200
    shown = shown_text(frontend, answer, True)
    assert re.fullmatch(r"(w\d+ )+", shown), shown  # the first candidate's words only
    assert len(fake_requests(fake_upstream, mark)) == 1
    assert fake_requests(second_upstream, mark) == []
    events = answer.events()
    name, last = events[-1]
    match frontend:
        case "responses":
            assert last["type"] == "response.failed"
            assert last["response"]["error"]["code"] == "server_error"  # as hosted
            kinds = [data["type"] for _, data in events]
            assert kinds.count("response.created") == 1
            assert sum(k in {"response.completed", "response.failed"} for k in kinds) == 1
            stored = gateway.stored(last["response"]["id"])
            assert stored["error"]["code"] == "upstream_stream_cut"
            assert served_by(gateway, last["response"]["id"]) is None
            assert [(x["backend"], x["outcome"]) for x in stored["attempts"]] == [("a-chat", "cut")]
        case "chat":
            assert last["error"]["code"] == "upstream_stream_cut"
            assert last["error"]["type"] == "server_error"
            assert "[DONE]" not in [data for _, data in events]
        case _:
            assert (name, last["type"]) == ("error", "error")
            assert last["error"]["type"] == "api_error"
            assert "message_stop" not in [data["type"] for _, data in events]


def test_the_fast_path_relays_its_one_candidate_and_ends_a_cut_with_an_error_line(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """Relayed, not translated (the chunks name the upstream's model): nothing to fail
    over to, a cut ends the stream with an error line and no ``[DONE]``, and a first byte
    too late is a 504 in the OpenAI shape."""
    mark = marker()
    answer = ask(gateway, "chat", "solo", f"{mark} {CUT}", True)
    assert answer.status == 200
    assert re.fullmatch(r"(w\d+ )+", shown_text("chat", answer, True))
    events = [data for _, data in answer.events()]
    assert {chunk["model"] for chunk in events[:-1]} == {"solo-a"}
    assert events[-1]["error"]["code"] == "upstream_stream_cut"
    assert "[DONE]" not in events
    late = ask(gateway, "chat", "solo", f"{marker()} [[silence:5000]]", True)
    assert late.status == 504
    assert late.json()["error"]["code"] == "upstream_timeout"


_ATTEMPTS = re.compile(
    r'^stateway_upstream_attempts_total\{backend="([^"]+)",outcome="([^"]+)"\} (\S+)$', re.M
)


def attempts_counted(gateway: RunningGateway) -> dict[tuple[str, str], float]:
    with urllib.request.urlopen(gateway.url + "/metrics") as reply:
        text = reply.read().decode()
    return {(backend, outcome): float(n) for backend, outcome, n in _ATTEMPTS.findall(text)}


def test_metrics_count_each_attempt_by_how_it_ended(gateway: RunningGateway) -> None:
    """A failover counts the failed attempt and the answered one; a cut counts as ``cut``
    and nothing else (no second attempt)."""
    before = attempts_counted(gateway)
    failover = route_name("chat", "500", "chat", False)
    ask(gateway, "chat", failover, f"{marker()} [[error:500]] [[only:{failover}-a]]", False)
    cut = route_name("chat", "cut", "chat", True)
    ask(gateway, "chat", cut, f"{marker()} {CUT} [[only:{cut}-a]]", True)
    after = attempts_counted(gateway)
    changed = {
        key: after[key] - before.get(key, 0) for key in after if after[key] != before.get(key)
    }
    assert changed == {("a-chat", "failed"): 1, ("b", "ok"): 1, ("a-chat", "cut"): 1}
