"""The error boundary: which answered errors are logged, at what level and in what words,
and a bug answered as a generic 500 logged with its traceback."""

from __future__ import annotations

import logging

import pytest

from stateway.core.errors import InternalError, NotFound, ServerShuttingDown
from stateway.surfaces.http.errors import error_answer, log_answered

REQUEST = {"type": "http", "method": "POST", "path": "/v1/responses"}


def test_the_gateways_faults_are_logged_from_500_a_shutdown_at_info(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO):
        log_answered(REQUEST, NotFound("No such response."), 499)
        log_answered(REQUEST, InternalError(), 500)
        log_answered({"type": "websocket", "path": "/v1/responses"}, ServerShuttingDown(), 503)
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "POST /v1/responses -> 500 The gateway failed to handle the request."),
        (
            logging.INFO,
            "GET /v1/responses -> 503 The server is shutting down; the response was ended "
            "before it finished.",
        ),
    ]


def test_a_bug_is_a_generic_500_logged_with_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    try:
        raise ValueError("the secret detail")
    except ValueError as raised:
        bug = raised
    assert bug.__traceback__ is not None
    answer = error_answer(REQUEST, bug)
    assert answer.status_code == 500
    assert b"the secret detail" not in answer.body
    [record] = caplog.records
    assert record.getMessage() == "unhandled error on POST /v1/responses"
    assert record.exc_info is not None
    assert record.exc_info[1] is bug
    assert bug.__traceback__ is None  # dropped once answered
