"""The HTTP surface's error boundary: what an error a route lets out answers, and its log
line (used by the Starlette app's exception handlers and by the express routes, each
frontend answering in its own shape)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import Message, Scope, Send

from stateway.core.errors import GatewayError, InternalError, ServerShuttingDown
from stateway.surfaces.asgi.answers import error_response

log = logging.getLogger(__name__)


class AnswerSend:
    """A route's ``send``, telling whether its answer began (its status line went out),
    for a route that answers as it runs (a keyed stream: :mod:`.keyed_runs`): an error
    after that is no longer its error boundary's to answer (a second status line answers
    nothing) but goes out of the app, as an error of a stream under way does: the server
    logs it and closes the connection."""

    __slots__ = ("_send", "began")

    def __init__(self, send: Send) -> None:
        self._send = send
        self.began = False

    async def __call__(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.began = True
        await self._send(message)


def error_answer(
    scope: Scope,
    error: Exception,
    respond: Callable[[GatewayError], Response] = error_response,
    logger: logging.Logger = log,
) -> Response:
    """The answer to an error a route let out: a :class:`GatewayError` in its own status
    (logged when it is the gateway's or the upstream's fault: as a warning, but a shutdown
    ending it at info, as expected), any other exception a
    generic 500 (:class:`InternalError`), never a stack trace (logged with its
    traceback). ``respond`` writes the answer in the frontend's shape (the OpenAI shape
    unless told), ``logger`` is the route's.

    The error's traceback is dropped once answered: a run's error raised by the route
    would otherwise hold the frames it went through, and the run in their locals, in a
    cycle only the garbage collector frees."""
    if isinstance(error, GatewayError):
        answer = respond(error)
        log_answered(scope, error, answer.status_code, logger)
    else:
        logger.error("unhandled error on %s %s", scope["method"], scope["path"], exc_info=error)
        answer = respond(InternalError())
    error.__traceback__ = None
    return answer


def log_answered(
    scope: Scope, error: GatewayError, status: int, logger: logging.Logger = log
) -> None:
    """The log line of ``error`` answered with ``status`` (the status a frontend words its
    own way), when it is the gateway's or the upstream's fault (500 or more): a warning,
    but a shutdown ending it at info, as expected. Its message only: never a credential
    the request carried."""
    if status < 500:
        return
    level = logging.INFO if isinstance(error, ServerShuttingDown) else logging.WARNING
    method = scope.get("method", "GET")  # a WebSocket upgrade is a GET
    logger.log(level, "%s %s -> %d %s", method, scope["path"], status, error.message)
