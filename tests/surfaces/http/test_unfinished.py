"""The filter on uvicorn's error logger: it drops uvicorn's error about an answer left
unfinished, of the request that left it so on purpose only."""

from __future__ import annotations

import contextvars
import logging

from stateway.surfaces.http.unfinished import UNFINISHED_ON_PURPOSE, leave_unfinished

UVICORNS = "ASGI callable returned without completing response."


def logged(message: str) -> logging.LogRecord:
    return logging.LogRecord("uvicorn.error", logging.ERROR, __file__, 1, message, None, None)


def test_only_uvicorns_error_of_a_request_left_unfinished_on_purpose_is_dropped() -> None:
    request = contextvars.copy_context()
    assert UNFINISHED_ON_PURPOSE.filter(logged(UVICORNS))  # not left so: kept
    request.run(leave_unfinished)
    assert not request.run(UNFINISHED_ON_PURPOSE.filter, logged(UVICORNS))
    assert request.run(UNFINISHED_ON_PURPOSE.filter, logged("Exception in ASGI application"))
    assert UNFINISHED_ON_PURPOSE.filter(logged(UVICORNS))  # another request's: kept
