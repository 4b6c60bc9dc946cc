"""``first_token_timeout`` end to end: the real ``stateway serve`` in front of two fake model
servers, each case its own two-candidate route, asked over raw HTTP.

The first candidate sends its headers at once, then its output late: the whole body
(``[[stall]]``) or, on a stream, its first token after the frames that open the answer
(``[[late]]``: bytes that are no output, which keep ``read_timeout`` at bay). Past its
``first_token_timeout`` the attempt fails as an upstream timeout and the second candidate
answers, unseen, through every frontend and both upstream reply shapes; the first
upstream request is closed. Once output has started a longer gap is not its to judge.
Unset, nothing changes. On the Chat Completions fast path (one candidate, nothing to fail
over to) the first output is the first body chunk: a reply without one in time is a 504,
a stream (its status line sent) ends with the error line.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from tests.e2e.configured import RunningGateway
from tests.e2e.routing import fake_requests, routed_gateway
from tests.e2e.test_failover_frontends import (
    FRONTENDS,
    Answer,
    ask,
    assert_streamed_whole,
    marker,
    shown_text,
)

WAIT = 0.5
"""``first_token_timeout`` of the first candidates (``read_timeout`` is 30 s)."""
LATE = "[[stall:8000]]"
"""Headers now, the body (a stream's every frame) 8 s later: past WAIT, inside read_timeout."""
WIRES = ("chat", "responses", "anthropic")
PAUSED = "[[words:4]] [[pause:1500]]"
"""Output at once, then a gap three times WAIT."""


def route(wire: str, case: str, frontend: str, stream: bool) -> str:
    return f"{wire}-{case}-{frontend}-{'stream' if stream else 'json'}"


CASES = [
    *(("chat", "stall", f, s) for f in FRONTENDS for s in (False, True)),
    *((w, "late", f, True) for w in WIRES for f in FRONTENDS),
    *((w, "pause", "responses", True) for w in WIRES),
    *(("unset", "stall", f, s) for f in ("responses", "chat") for s in (False, True)),
]


def config(first: str, second: str) -> str:
    """Backends ``a-<wire>`` (the first fake, ``first_token_timeout``), ``unset`` (the
    first fake without it) and ``b``; a route per case over ``a-<wire>`` (or ``unset``)
    then ``b``; ``solo`` and ``solo-unset``, one candidate each (the fast path)."""
    text = "[health]\nfailure_threshold = 1000\ncooldown = 60.0\n"
    for api in WIRES:
        text += f'[[backends]]\nname = "a-{api}"\nurl = "{first}"\napi = "{api}"\n'
        text += f"first_token_timeout = {WAIT}\nread_timeout = 30\n"
    text += f'[[backends]]\nname = "unset"\nurl = "{first}"\nread_timeout = 30\n'
    text += f'[[backends]]\nname = "b"\nurl = "{second}"\n'
    for wire, case, frontend, stream in CASES:
        name = route(wire, case, frontend, stream)
        backend = "unset" if wire == "unset" else f"a-{wire}"
        text += f'[[routes]]\nname = "{name}"\n'
        text += f'[[routes.candidates]]\nbackend = "{backend}"\nmodel = "{name}-a"\n'
        text += f'[[routes.candidates]]\nbackend = "b"\nmodel = "{name}-b"\npriority = 1\n'
    for name, backend in (("solo", "a-chat"), ("solo-unset", "unset")):
        text += f'[[routes]]\nname = "{name}"\n'
        text += f'[[routes.candidates]]\nbackend = "{backend}"\nmodel = "{name}-a"\n'
    return text


@pytest.fixture(scope="module")
def gateway(
    fake_upstream: str, second_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    text = config(fake_upstream, second_upstream)
    with routed_gateway(tmp_path_factory.mktemp("first-token"), text) as running:
        yield running


def left(upstream: str, mark: str) -> bool:
    """Whether the gateway closed its request to ``upstream`` (waited for a while)."""
    for _ in range(50):
        [logged] = fake_requests(upstream, mark)
        if logged.get("disconnected"):
            return True
        time.sleep(0.1)
    return False


@pytest.mark.parametrize(
    ("wire", "case", "frontend", "stream"),
    [c for c in CASES if c[0] != "unset" and c[1] != "pause"],
    ids=lambda v: str(v),
)
def test_output_late_after_the_headers_fails_over_unseen(
    gateway: RunningGateway,
    fake_upstream: str,
    second_upstream: str,
    wire: str,
    case: str,
    frontend: str,
    stream: bool,
) -> None:
    name = route(wire, case, frontend, stream)
    mark = marker()
    script = LATE if case == "stall" else "[[late:8000]]"
    started = time.monotonic()
    answer = ask(gateway, frontend, name, f"{mark} {script} [[only:{name}-a]]", stream)
    assert time.monotonic() - started < 5
    assert answer.status == 200, answer.body
    assert shown_text(frontend, answer, stream) == f"Hello! You said: {mark}"
    if stream:
        assert_streamed_whole(frontend, answer)
    [served] = fake_requests(second_upstream, mark)
    assert served["body"]["model"] == f"{name}-b"
    assert left(fake_upstream, mark)  # the late request was closed
    if frontend == "responses":
        response_id = answer.events()[0][1]["response"]["id"] if stream else answer.json()["id"]
        attempts = gateway.stored(response_id)["attempts"]
        ended = [(x["backend"], x["outcome"], x["detail"]) for x in attempts]
        assert ended == [(f"a-{wire}", "failed", "upstream_timeout"), ("b", "ok", None)]


@pytest.mark.parametrize("wire", WIRES)
def test_a_gap_after_the_first_output_is_not_cut(
    gateway: RunningGateway, fake_upstream: str, second_upstream: str, wire: str
) -> None:
    name = route(wire, "pause", "responses", True)
    mark = marker()
    answer = ask(gateway, "responses", name, f"{mark} {PAUSED} [[only:{name}-a]]", True)
    assert answer.status == 200, answer.body
    assert shown_text("responses", answer, True).split() == ["w1", "w2", "w3", "w4"]
    assert_streamed_whole("responses", answer)
    assert fake_requests(second_upstream, mark) == []
    attempts = gateway.stored(answer.events()[0][1]["response"]["id"])["attempts"]
    assert [(x["backend"], x["outcome"]) for x in attempts] == [(f"a-{wire}", "ok")]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("frontend", ["responses", "chat"])
def test_unset_a_late_first_output_is_waited_for(
    gateway: RunningGateway, second_upstream: str, frontend: str, stream: bool
) -> None:
    name = route("unset", "stall", frontend, stream)
    mark = marker()
    started = time.monotonic()
    answer = ask(gateway, frontend, name, f"{mark} [[stall:1500]] [[only:{name}-a]]", stream)
    assert time.monotonic() - started >= 1.4  # waited out (the fake sleeps 1.5 s)
    assert answer.status == 200, answer.body
    assert shown_text(frontend, answer, stream) == f"Hello! You said: {mark}"
    assert fake_requests(second_upstream, mark) == []


def test_the_fast_path_times_out_a_late_first_chunk(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """No second candidate: a reply is a 504 in the OpenAI shape, a stream (its status
    line out at once) ends with the error line; either way the upstream request is closed.
    The first chunk is the first output here: a role chunk in time is enough."""
    mark = marker()
    late = ask(gateway, "chat", "solo", f"{mark} {LATE}", False)
    assert late.status == 504, late.body
    error = late.json()["error"]
    assert error["code"] == "upstream_timeout"
    assert "first_token_timeout" in error["message"]
    assert left(fake_upstream, mark)
    mark = marker()
    streamed = ask(gateway, "chat", "solo", f"{mark} {LATE}", True)
    assert streamed.status == 200
    events = [data for _, data in streamed.events()]
    assert events[-1]["error"]["code"] == "upstream_timeout"
    assert "[DONE]" not in events
    assert left(fake_upstream, mark)
    opened = ask(gateway, "chat", "solo", f"{marker()} [[words:2]] [[late:1500]]", True)
    assert re.fullmatch(r"w1 w2 ?", shown_text("chat", opened, True))


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_the_fast_path_relays_a_gap_after_its_first_chunk_and_waits_unset(
    gateway: RunningGateway, stream: bool
) -> None:
    paused = ask(gateway, "chat", "solo", f"{marker()} {PAUSED}", stream)
    assert paused.status == 200, paused.body
    assert shown_text("chat", paused, stream).split() == ["w1", "w2", "w3", "w4"]
    mark = marker()
    unset = ask(gateway, "chat", "solo-unset", f"{mark} [[stall:1500]]", stream)
    assert unset.status == 200, unset.body
    assert shown_text("chat", unset, stream) == f"Hello! You said: {mark}"


def test_answers_are_relayed_not_translated(gateway: RunningGateway) -> None:
    """``solo`` is the fast path: its chunks name the upstream's model."""
    answer = ask(gateway, "chat", "solo", f"{marker()} [[words:2]]", True)
    models = {data["model"] for _, data in answer.events() if data != "[DONE]"}
    assert models == {"solo-a"}
    late: Answer = ask(gateway, "chat", "solo", f"{marker()} [[stall:100]]", False)
    assert late.json()["model"] == "solo-a"
