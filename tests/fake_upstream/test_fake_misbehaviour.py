"""The fake's misbehaviours: pacing, silence, huge replies, leaked keys, short keep-alive."""

from __future__ import annotations

import socket
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.fake_upstream.script import Script, parse_script

KEY = "sk-Fake-MixedCase-Key-0123"


def test_new_directives_parse() -> None:
    script = parse_script(
        "x [[silence:10]] [[stall:20]] [[trickle:30]] [[huge:4096]] [[leak:text]] y"
    )
    values = (script.silence_ms, script.stall_ms, script.trickle_ms, script.huge, script.leak)
    assert values == (10, 20, 30, 4096, "text")
    assert script.text.split() == ["x", "y"]


@pytest.mark.parametrize("text", ["[[leak:xml]]", "[[leak]]", "[[huge:big]]", "[[trickle]]"])
def test_malformed_misbehaviours_stay_text(text: str) -> None:
    assert parse_script(text) == Script(text=text)


def post(url: str, text: str, *, stream: bool = False, key: str = KEY) -> tuple[int, str, bytes]:
    """POST a chat request; (status, content type, body)."""
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]}
    request = urllib.request.Request(
        url + "/chat/completions",
        data=orjson.dumps(body),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers["Content-Type"], response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read()


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with start_fake_upstream(keep_alive=1) as base_url:
        yield base_url


def test_late_holds_back_the_first_payload_and_pause_the_second(url: str) -> None:
    """``[[late]]``: the role chunk at once, the first text 0.3 s later; ``[[pause]]``: the
    second text another 0.3 s after it."""
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "[[words:3]] [[late:300]] [[pause:300]]"}],
    }
    request = urllib.request.Request(
        url + "/chat/completions",
        data=orjson.dumps(body),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    started = time.monotonic()
    arrivals: list[tuple[float, Any]] = []
    with urllib.request.urlopen(request, timeout=30) as response:
        for line in response:
            if line.startswith(b"data: {"):
                arrivals.append((time.monotonic() - started, orjson.loads(line[6:])))
    texts = [
        (at, chunk["choices"][0]["delta"].get("content"))
        for at, chunk in arrivals
        if chunk["choices"]
    ]
    role_at = texts[0][0]
    (first_at, first), (second_at, second) = [(at, t) for at, t in texts if t][:2]
    assert role_at < 0.25
    # the gaps are the fake's sleeps, read by the client a little early or late
    assert first_at - role_at >= 0.25
    assert second_at - first_at >= 0.25
    assert (first + second).split() == ["w1", "w2"]
    assert parse_script("[[late:300]] [[only:x]]").for_model("y").late_ms is None


def test_trickle_and_pauses_deliver_the_same_reply(url: str) -> None:
    plain = post(url, "hi")[2]
    started = time.monotonic()
    paced = post(url, "hi [[trickle:1]] [[silence:100]] [[stall:100]]")[2]
    assert time.monotonic() - started > 0.2 + len(paced) / 1000
    assert orjson.loads(paced)["choices"] == orjson.loads(plain)["choices"]


@pytest.mark.parametrize("stream", [False, True])
def test_huge_replies_have_the_size_asked(url: str, stream: bool) -> None:
    status, _, body = post(url, "[[huge:300000]]", stream=stream)
    assert status == 200
    if stream:
        chunks = [orjson.loads(line[6:]) for line in body.split(b"\n\n") if line[6:7] == b"{"]
        text = "".join(
            c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]
        )
    else:
        text = orjson.loads(body)["choices"][0]["message"]["content"]
    assert text == "x" * 300_000


@pytest.mark.parametrize(
    ("mode", "content_type"), [("json", "application/json"), ("text", "text/plain")]
)
def test_leaks_echo_the_key_lower_cased_and_as_a_prefix(
    url: str, mode: str, content_type: str
) -> None:
    status, media, body = post(url, f"[[leak:{mode}]] [[error:503]]")
    assert status == 503
    assert media.startswith(content_type)
    assert KEY.lower() in body.decode()
    assert KEY[:12] in body.decode()


def test_a_stream_leak_ends_in_an_error_event(url: str) -> None:
    status, _, body = post(url, "[[words:2]] [[leak:stream]]", stream=True)
    assert status == 200
    frames: list[Any] = [
        orjson.loads(f[6:]) for f in body.split(b"\n\n") if f.startswith(b"data: {")
    ]
    assert frames[-1]["error"]["message"].startswith(f"Invalid key {KEY.lower()}")
    assert b"[DONE]" not in body


def test_fail_ends_a_stream_with_an_error_event_after_its_payloads(url: str) -> None:
    """``[[fail:N]]``: vLLM's error line after N payload chunks (with none, after the role
    chunk); with ``[[llamacpp]]``, llama-server's 2025 ``error:`` line, then ``[DONE]``."""
    status, _, body = post(url, "[[words:3]] [[fail:2]]", stream=True)
    frames = body.split(b"\n\n")[:-1]
    assert status == 200
    assert [orjson.loads(f[6:])["choices"][0]["delta"].get("content") for f in frames[:3]] == [
        "",
        "w1 ",
        "w2 ",
    ]
    assert (
        orjson.loads(frames[3][6:])["error"]["message"] == "Scripted failure mid-stream: [[fail]]"
    )
    assert len(frames) == 4
    _, _, opening = post(url, "[[words:3]] [[fail:0]] [[llamacpp]]", stream=True)
    role, line, done = opening.split(b"\n\n")[:-1]
    assert orjson.loads(role[6:])["choices"][0]["delta"]["role"] == "assistant"
    assert orjson.loads(line.removeprefix(b"error: "))["code"] == 500
    assert done == b"data: [DONE]"
    assert post(url, "[[words:3]] [[fail:0]]")[2].startswith(b'{"id"')  # unstreamed: answered


@pytest.mark.parametrize(
    ("path", "field"), [("/chat/completions", "messages"), ("/responses", "input")]
)
def test_code_names_the_code_of_the_failing_streams_error(url: str, path: str, field: str) -> None:
    """``[[code:CODE]]``: [[fail]]'s error event carries it, as hosted OpenAI ends a stream
    with ``insufficient_quota``."""
    text = "[[words:3]] [[fail:1]] [[code:insufficient_quota]]"
    content: object = [{"role": "user", "content": text}] if field == "messages" else text
    request = urllib.request.Request(
        url + path,
        data=orjson.dumps({"model": "m", "stream": True, field: content}),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        last = response.read().split(b"\n\n")[-2].split(b"data: ", 1)[1]
    error = orjson.loads(last)
    assert error.get("error", error)["code"] == "insufficient_quota"


def test_unanswered_is_a_stream_of_done_alone(url: str) -> None:
    assert post(url, "hi [[unanswered]]", stream=True)[2] == b"data: [DONE]\n\n"
    assert parse_script("[[unanswered]] [[fail:1]] [[only:x]]").for_model("y") == Script(only="x")


def test_overrun_goes_on_with_data_in_the_done_event(url: str) -> None:
    """``[[overrun]]``: the whole answer, then ``[DONE]`` with another data line in its
    event (a server writing past its end); unstreamed answers ignore it."""
    body = post(url, "[[words:3]] [[overrun]]", stream=True)[2]
    *events, done = body.split(b"\n\n")[:-1]
    assert done == b"data: [DONE]\ndata: more"
    chunks = [orjson.loads(event[6:]) for event in events]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "w1 w2 w3"
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    assert post(url, "[[words:3]] [[overrun]]")[2].startswith(b'{"id"')
    assert parse_script("[[overrun]] [[only:x]]").for_model("y") == Script(only="x")


def test_truncate_ends_a_stream_cleanly_before_its_ending(url: str) -> None:
    """The body ends as a whole one does, after the frames asked for: no finish, no usage,
    no ``[DONE]``."""
    status, _, body = post(url, "[[words:3]] [[truncate:2]]", stream=True)
    events = [orjson.loads(event[6:]) for event in body.split(b"\n\n")[:-1]]
    assert status == 200
    assert [e["choices"][0]["delta"].get("content") for e in events] == ["", "w1 ", "w2 "]
    assert all(e["choices"][0]["finish_reason"] is None for e in events)
    assert post(url, "[[words:3]] [[truncate:0]]")[2].startswith(b'{"id"')  # unstreamed


@pytest.mark.parametrize("stream", [False, True])
def test_finish_ends_a_chat_answer_with_that_reason(url: str, stream: bool) -> None:
    body = post(url, "[[words:2]] [[finish:abort]]", stream=stream)[2]
    if stream:
        *_, finish, done = body.split(b"\n\n")[:-1]
        assert (orjson.loads(finish[6:])["choices"][0]["finish_reason"], done) == (
            "abort",
            b"data: [DONE]",
        )
    else:
        assert orjson.loads(body)["choices"][0]["finish_reason"] == "abort"
    scripted = parse_script("[[truncate:1]] [[finish:error]] [[only:x]]")
    assert scripted.for_model("y") == Script(only="x")


def test_keep_alive_closes_idle_connections(url: str) -> None:
    host, port = url.removeprefix("http://").removesuffix("/v1").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: fake\r\n\r\n")
        answered = time.monotonic()
        received = b""
        while chunk := sock.recv(65536):  # ends when the server closes (timeout 10 s)
            received += chunk
        idle = time.monotonic() - answered
    assert received.startswith(b"HTTP/1.1 200")
    assert 0.5 < idle < 3  # uvicorn's default would keep it 5 s


def test_only_scopes_misbehaviours_to_one_model() -> None:
    script = parse_script("hi [[error:500]] [[cut:2]] [[slow:5]] [[only:bad-model]]")
    assert script.only == "bad-model"
    assert script.for_model("bad-model") is script
    plain = script.for_model("good-model")
    assert (plain.error, plain.cut, plain.slow_ms, plain.text) == (None, None, None, "hi")


def test_only_fails_the_named_model_over_the_wire(client: Any) -> None:
    text = "hi [[error:500]] [[only:bad-model]]"
    answered = client.chat.completions.create(
        model="good-model", messages=[{"role": "user", "content": text}]
    )
    assert answered.choices[0].message.content == "Hello! You said: hi"
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(
            model="bad-model", messages=[{"role": "user", "content": text}]
        )


def asked(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    ("path", "body", "error"),
    [
        (
            "/chat/completions",
            {"messages": asked("[[error:503]] [[reported]]")},
            {
                "message": "Scripted failure: [[error:503]]",
                "type": "server_error",
                "param": None,
                "code": None,
            },
        ),
        ("/responses", {"input": "[[context:1]] [[reported]] too long"}, None),
        (
            "/messages",
            {"max_tokens": 8, "messages": asked("[[error:529]] [[reported]]")},
            {"type": "overloaded_error", "message": "Scripted failure: [[error:529]]"},
        ),
    ],
)
def test_reported_sends_the_scripted_refusal_as_a_200_json_body(
    url: str, path: str, body: dict[str, Any], error: dict[str, Any] | None, stream: bool
) -> None:
    """As some proxies and servers answer even a streamed request: the error body (in the
    wire's shape), its status 200 and its type JSON, not an event stream."""
    request = urllib.request.Request(
        url + path,
        data=orjson.dumps({"model": "m", "stream": stream, **body}),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {KEY}"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "application/json"
        answer = orjson.loads(response.read())
    if path == "/messages":
        assert answer == {"type": "error", "error": error}
    elif error is not None:
        assert answer == {"error": error}
    else:
        assert answer["error"]["code"] == "context_length_exceeded"
