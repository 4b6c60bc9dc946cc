"""Text that breaks stores and encoders, end to end over SQLite and PostgreSQL (whose
``text`` refuses NUL, whose ``jsonb`` refuses even its escape, and whose indexes refuse a
long row): what goes in comes back, from the answer, the stored response, its input
items, a continuation and a conversation, and nothing fails on the way."""

from __future__ import annotations

import secrets
import time
from typing import Any

import httpx2
import orjson

MODEL = "fake-model"
HOSTILE = "a\x00b \\u0000 \\\x00 \U0001f600 e\u0301 \u05e9\u05dc\u05d5\u05dd \r\n x\u2028y \ufeff"
"""NUL (and the text of its escape, after an escaped backslash too), an emoji outside the
BMP, a combining accent, right-to-left text, CR LF, a line separator, a byte order mark."""


def post(gateway: str, path: str, body: dict[str, Any]) -> httpx2.Response:
    return httpx2.post(
        gateway + path,
        content=orjson.dumps(body),
        headers={"content-type": "application/json", "authorization": "Bearer sk-test"},
        timeout=60,
    )


def get(gateway: str, path: str) -> httpx2.Response:
    return httpx2.get(gateway + path, headers={"authorization": "Bearer sk-test"}, timeout=60)


def answer(response: dict[str, Any]) -> str:
    text: str = response["output"][-1]["content"][0]["text"]
    return text


def test_hostile_text_round_trips_through_a_stored_response(gateway: str) -> None:
    started = int(time.time())
    body = {
        "model": MODEL,
        "instructions": HOSTILE,
        "metadata": {"k.$x": HOSTILE},
        "input": f"{HOSTILE} [[say:{HOSTILE}]]",
    }
    created = post(gateway, "/v1/responses", body)
    assert created.status_code == 200, created.text
    response = created.json()
    assert answer(response) == HOSTILE
    stored = get(gateway, f"/v1/responses/{response['id']}").json()
    assert stored == response
    assert (stored["instructions"], stored["metadata"]) == (HOSTILE, body["metadata"])
    [item] = get(gateway, f"/v1/responses/{response['id']}/input_items").json()["data"]
    assert item["content"][0]["text"] == body["input"]
    continued = post(
        gateway,
        "/v1/responses",
        {"model": MODEL, "previous_response_id": response["id"], "input": "[[echo]]"},
    )
    assert f"assistant: {HOSTILE}" in answer(continued.json())
    streamed = post(gateway, "/v1/responses", {**body, "stream": True})
    assert streamed.status_code == 200
    assert b"\r" not in streamed.content, "a CR in the text is escaped, never a line end"
    usage = get(gateway, f"/v1/usage?start_time={started}")
    assert usage.status_code == 200, usage.text
    assert MODEL in {bucket["model"] for bucket in usage.json()["data"]}


def test_a_model_name_holding_nul_stores_its_response(gateway: str) -> None:
    """The model names the candidate a continuation goes back to: one holding NUL is no
    hint, and its response is stored all the same, answered or run in the background."""
    model = "fake\x00model"
    answered = post(gateway, "/v1/responses", {"model": model, "input": "hi"})
    assert answered.status_code == 200, answered.text
    background = post(
        gateway, "/v1/responses", {"model": model, "input": "hi", "background": True}
    ).json()
    deadline = time.monotonic() + 30
    while True:
        ended = get(gateway, f"/v1/responses/{background['id']}").json()
        if ended["status"] not in ("queued", "in_progress") or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert (ended["status"], ended["model"]) == ("completed", model)
    stored = get(gateway, f"/v1/responses/{answered.json()['id']}").json()
    assert (stored["status"], stored["model"]) == ("completed", model)
    continued = post(
        gateway,
        "/v1/responses",
        {"model": model, "previous_response_id": stored["id"], "input": "again"},
    )
    assert continued.status_code == 200, continued.text


def test_a_conversation_turns_long_item_id_is_stored_under_a_new_one(gateway: str) -> None:
    conversation = post(gateway, "/v1/conversations", {"metadata": {"k": HOSTILE}}).json()
    assert conversation["metadata"] == {"k": HOSTILE}
    long_id = "msg_" + secrets.token_hex(2048)
    item = {"type": "message", "role": "user", "content": HOSTILE, "id": long_id}
    turn = post(
        gateway,
        "/v1/responses",
        {"model": MODEL, "conversation": conversation["id"], "input": [item]},
    )
    assert turn.status_code == 200, turn.text
    items = get(gateway, f"/v1/conversations/{conversation['id']}/items?order=asc").json()
    [given, answered] = items["data"]
    assert given["content"][0]["text"] == HOSTILE
    assert given["id"] != long_id
    assert answered["id"] == turn.json()["output"][-1]["id"]
    [stored] = get(gateway, f"/v1/responses/{turn.json()['id']}/input_items").json()["data"]
    assert stored["id"] == long_id, "the response keeps its own copy"
