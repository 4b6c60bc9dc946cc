"""An MCP session's id is a bearer-like handle: the SDK's log records that name one (a
session opened, ended, refused to another credential, unknown) keep their message with
the id masked, at every level the gateway logs at."""

from __future__ import annotations

import logging

import httpx2
import pytest

from stateway.mcp_session_logs import LOGGERS, SessionIdMask, mask_session_ids, masked
from tests.surfaces.mcp.test_server import ACCEPT, ACME, answering, initialize, serving
from tests.surfaces.mcp.test_sessions import OTHER, ending

LISTING = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}


async def test_no_session_id_reaches_the_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with serving(answering()) as served, httpx2.AsyncClient() as http:
        opened = await http.post(served.url, json=initialize("2025-11-25"), headers=ACCEPT)
        session = opened.headers["mcp-session-id"]
        served.identity = OTHER  # another credential naming the session
        assert (
            await http.post(served.url, json=LISTING, headers=ending(opened))
        ).status_code == 404
        guessed = {**ending(opened), "mcp-session-id": "f" * 31 + "x: guessed"}
        assert (await http.post(served.url, json=LISTING, headers=guessed)).status_code == 404
        served.identity = ACME
        assert (await http.delete(served.url, headers=ending(opened))).status_code == 200

    text = caplog.text
    assert session not in text
    assert "f" * 31 + "x" not in text
    messages = [record.getMessage() for record in caplog.records]
    refused = [message for message in messages if "credential does not match" in message]
    assert refused == [f"Rejecting request for session {masked(session)}: credential does not "
                       "match the one that created the session"]  # fmt: skip
    assert any(
        message.startswith("Created new transport with session ID: ***") for message in messages
    )
    assert f"Terminating session: {masked(session)}" in messages
    assert any("unknown or expired session ID: ***" in message for message in messages)


def test_the_mask_names_a_session_alike_each_time_and_reveals_none_of_it() -> None:
    session = "0123456789abcdef" * 2
    assert masked(session) == masked(session) != masked("f" * 32)
    assert not any(session[i : i + 4] in masked(session) for i in range(29))


def test_an_id_in_a_record_the_mask_does_not_know_is_masked_too() -> None:
    session = "0123456789abcdef" * 2
    record = logging.LogRecord(
        "mcp.server.streamable_http",
        logging.INFO,
        __file__,
        1,
        "Session %s resumed",
        (session,),
        None,
    )
    assert SessionIdMask().filter(record)
    assert record.getMessage() == f"Session {masked(session)} resumed"


def test_installing_the_mask_masks_each_sdk_logger_once_however_often_called(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Installed afresh (loggers as a new process has them): every one of the SDK's
    loggers masks, and a second install does not mask the mask again."""
    for name in LOGGERS:
        monkeypatch.setattr(logging.getLogger(name), "filters", [])
    mask_session_ids()
    mask_session_ids()
    session = "0123456789abcdef" * 2
    caplog.set_level(logging.INFO)
    for name in LOGGERS:
        logging.getLogger(name).info("Terminating session: %s", session)
    assert [(record.name, record.getMessage()) for record in caplog.records] == [
        (name, f"Terminating session: {masked(session)}") for name in LOGGERS
    ]


def test_an_id_no_codec_can_encode_is_masked_without_raising() -> None:
    """The mask runs inside the SDK's logging calls: whatever a record holds, it must not
    raise there."""
    session = "abc\udcff"  # a lone surrogate: no UTF-8
    record = logging.LogRecord(
        "mcp.server.streamable_http", logging.INFO, __file__, 1, "Terminating session: %s",
        (session,), None,
    )  # fmt: skip
    assert SessionIdMask().filter(record)
    assert record.getMessage() == f"Terminating session: {masked(session)}"
