"""An answer left unfinished on purpose, and the log filter that keeps uvicorn quiet about it.

A relayed body its upstream cut part-way cannot be finished honestly: closing the
connection is how its client learns the body is short. The app returns without the
body's end, uvicorn closes the connection, and logs an error of the app's, which it is
not: the relay has already logged the cut, naming the server. The request's own task marks
itself (:func:`leave_unfinished`), and :data:`UNFINISHED_ON_PURPOSE`, installed on
uvicorn's error logger by :func:`stateway.serving.server_config`, drops that one message of
that task's. The filter matches uvicorn's wording: were it to change, the error would be
logged again (the fast path's e2e test says so).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Final

_UNFINISHED_ERROR: Final = "ASGI callable returned without completing response."
"""What uvicorn logs (an error) when an app returns before its body's end."""

_LEFT_UNFINISHED: ContextVar[bool] = ContextVar("stateway_left_unfinished", default=False)


def leave_unfinished() -> None:
    """Say that the current request's answer is left unfinished on purpose. Called from
    the request's own task (uvicorn logs from it once the app returns)."""
    _LEFT_UNFINISHED.set(True)


class _UnfinishedOnPurpose(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (_LEFT_UNFINISHED.get() and record.msg == _UNFINISHED_ERROR)


UNFINISHED_ON_PURPOSE: Final = _UnfinishedOnPurpose()
