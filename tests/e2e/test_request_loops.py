"""A backend URL pointing at the gateway itself (its port given for the model server's,
say): the real ``stateway serve``, reloaded onto its own address, refuses the request
that comes back at once, instead of sending it on again hop after hop (each holding a
connection and logging a failure) until its pool runs out."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from tests.e2e.reloading import await_status, serving, sighup

LOOP_STATUS = 508  # Loop Detected

BACKEND = """
[[backends]]
name = "up"
url = "{url}"
"""


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any], float]:
    """The status, JSON body and seconds taken of a POST."""
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    began = time.monotonic()
    try:
        with urllib.request.urlopen(request, timeout=60) as reply:
            return reply.status, json.loads(reply.read()), time.monotonic() - began
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read()), time.monotonic() - began


def test_a_backend_pointing_at_the_gateway_itself_is_refused_as_a_loop(
    tmp_path: Path, fake_upstream: str
) -> None:
    with serving(tmp_path, BACKEND.format(url=fake_upstream)) as gateway:
        sighup(gateway, tmp_path, BACKEND.format(url=gateway.url + "/v1"))
        await_status(gateway, lambda s: s["generation"] == 2)

        status, body, took = post(
            gateway.url + "/v1/responses", {"model": "fake-model", "input": "hi"}
        )
        assert status == 502, body
        assert body["error"]["code"] == "upstream_error"
        message = body["error"]["message"]
        assert f"answered {LOOP_STATUS}" in message
        assert "points at this gateway itself" in message
        assert took < 10  # not the pool's 30 s, nor hop after hop

        # The Chat fast path relays the upstream's answer: the loop's own refusal.
        chat = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
        status, body, took = post(gateway.url + "/v1/chat/completions", chat)
        assert status == LOOP_STATUS, body
        assert body["error"]["code"] == "loop_detected"
        assert took < 10

    refused = gateway.log.read_text().count("request loop: refused ")
    assert 2 <= refused < 10  # each request refused on its first hop back
