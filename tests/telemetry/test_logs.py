"""JSON log lines: one object per line, with the request id of the request they were
written for, and the exception when one is attached."""

from __future__ import annotations

import io
import logging

import orjson
import pytest

from stateway.core.telemetry import REQUEST_ID
from stateway.telemetry.logs import TEXT_FORMAT, JsonFormatter, TextFormatter, configure_logging


def logged(
    emit: logging.Logger, message: str, *args: object, **kwargs: object
) -> dict[str, object]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    emit.addHandler(handler)
    try:
        emit.warning(message, *args, **kwargs)  # type: ignore[arg-type]
    finally:
        emit.removeHandler(handler)
    [line] = stream.getvalue().splitlines()
    parsed = orjson.loads(line)
    assert isinstance(parsed, dict)
    return parsed


def test_a_line_is_a_json_object_with_the_request_id() -> None:
    token = REQUEST_ID.set("req_0123")
    try:
        entry = logged(logging.getLogger("stateway.test"), "route %s: %d", "r", 3)
    finally:
        REQUEST_ID.reset(token)
    assert entry["message"] == "route r: 3"
    assert entry["level"] == "warning"
    assert entry["logger"] == "stateway.test"
    assert entry["request_id"] == "req_0123"
    assert str(entry["time"]).endswith("+00:00")


def test_outside_a_request_there_is_no_request_id() -> None:
    entry = logged(logging.getLogger("stateway.test"), "started")
    assert "request_id" not in entry


def test_an_exception_travels_in_the_line() -> None:
    try:
        raise ValueError('bad "quoted"\nvalue')
    except ValueError:
        entry = logged(logging.getLogger("stateway.test"), "failed", exc_info=True)
    assert "ValueError" in str(entry["exception"])
    assert entry["message"] == "failed"


@pytest.mark.parametrize(("form", "formatter"), [("json", JsonFormatter), ("text", TextFormatter)])
def test_configure_logging_installs_one_root_handler(form: str, formatter: type) -> None:
    root, own = logging.getLogger(), logging.getLogger("stateway")
    saved = root.handlers, root.level, own.level
    try:
        configure_logging(form, "warning")  # type: ignore[arg-type]
        [handler] = root.handlers
        assert type(handler.formatter) is formatter
        if form == "text":
            assert handler.formatter is not None
            assert handler.formatter._fmt == TEXT_FORMAT
        assert root.level == logging.WARNING
        assert own.level == logging.WARNING
        assert logging.getLogger("httpx2").level == logging.WARNING
    finally:
        root.handlers, root.level = saved[:2]
        own.setLevel(saved[2])


def test_a_text_line_stays_one_line_whatever_its_message_holds() -> None:
    """A request's path (``%0A`` decodes to a line feed) or an upstream's error message is
    written into a line: it must not start a line of its own that reads as the gateway's."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter(TEXT_FORMAT))
    emit = logging.getLogger("stateway.test")
    emit.addHandler(handler)
    forged = "\n2026-12-06 06:00:00,000 ERROR stateway.auth: admin key accepted\r"
    try:
        emit.warning("%s %s -> %d %s", "GET", "/v1/responses/resp_1" + forged, 503, "down")
        try:
            raise ValueError("first\nsecond")
        except ValueError:
            emit.error("failed", exc_info=True)
    finally:
        emit.removeHandler(handler)
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(
        "WARNING stateway.test: GET /v1/responses/resp_1\\n2026-12-06 06:00:00,000 ERROR "
        "stateway.auth: admin key accepted\\r -> 503 down"
    )
    assert lines[1].endswith("ERROR stateway.test: failed")
    assert lines[2] == "Traceback (most recent call last):"  # a traceback keeps its lines
    assert lines[-2:] == ["ValueError: first", "second"]


def test_debug_is_the_gateways_own_libraries_stay_at_info() -> None:
    """aiosqlite logs every statement with its parameters at DEBUG (the sealing key's)."""
    root, own = logging.getLogger(), logging.getLogger("stateway")
    saved = root.handlers, root.level, own.level
    try:
        configure_logging("text", "debug")
        assert logging.getLogger("stateway.core.runs").isEnabledFor(logging.DEBUG)
        assert not logging.getLogger("aiosqlite").isEnabledFor(logging.DEBUG)
        assert logging.getLogger("aiosqlite").isEnabledFor(logging.INFO)
        configure_logging("text", "error")
        assert not logging.getLogger("stateway.core.runs").isEnabledFor(logging.WARNING)
    finally:
        root.handlers, root.level = saved[:2]
        own.setLevel(saved[2])


@pytest.mark.parametrize("quiet", ["alembic", "httpx2"])
def test_a_quietened_library_is_never_louder_than_the_level_asked(quiet: str) -> None:
    """Its warnings are dropped at ``error``, as every other library's are."""
    root, own, library = (
        logging.getLogger(),
        logging.getLogger("stateway"),
        logging.getLogger(quiet),
    )
    saved = root.handlers, root.level, own.level, library.level
    try:
        configure_logging("text", "error")
        assert not library.isEnabledFor(logging.WARNING)
        assert library.isEnabledFor(logging.ERROR)
        configure_logging("text", "info")
        assert not library.isEnabledFor(logging.INFO)
        assert library.isEnabledFor(logging.WARNING)
    finally:
        root.handlers, root.level = saved[:2]
        own.setLevel(saved[2])
        library.setLevel(saved[3])
