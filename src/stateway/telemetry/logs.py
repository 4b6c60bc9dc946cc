"""The process's log lines: plain text (the default) or one JSON object per line; either
way one line per record (a text message's line breaks escaped), but an exception's
traceback.

``[logging] format = "json"`` (``STATEWAY_LOG_FORMAT=json``) writes each record to stderr
as ``{"time", "level", "logger", "message"}``, with ``request_id`` when it was written
while serving a request (the ``x-request-id`` its answer carries; a run started by the
request keeps it) and ``exception`` when one is attached. uvicorn's own records go
through the same handler.

``debug`` is the gateway's own loggers' (``stateway.*``): libraries stay at ``info`` or
above, since at ``debug`` some write what must never reach a log (aiosqlite every
statement with its parameters, the sealing key's among them; a WebSocket library the
frames it carries).
"""

from __future__ import annotations

import datetime
import logging
from typing import Any, Final, Literal

import orjson

from stateway.core.telemetry import REQUEST_ID

TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"
OWN: Final = "stateway"
"""The gateway's own loggers' parent: the only ones ``debug`` applies to."""
QUIET: Final = {"alembic": logging.WARNING, "httpx2": logging.WARNING}
"""Loggers too chatty at INFO (the MCP client's HTTP library logs every request): at
this level, or the one asked when it is higher."""


_LINE_BREAKS: Final = str.maketrans({"\n": "\\n", "\r": "\\r"})


class TextFormatter(logging.Formatter):
    """The library's, but a message's line breaks are written escaped (``\\n``): a line
    quotes what others chose (a request's path, where ``%0A`` decodes to a line feed; a
    model server's error message), which must not start a line that reads as the
    gateway's own. An exception's traceback keeps its lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        return super().formatMessage(record).translate(_LINE_BREAKS)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = REQUEST_ID.get()
        if request_id is not None:
            entry["request_id"] = request_id
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def quietened(
    level: Literal["debug", "info", "warning", "error"], quiet: int = logging.WARNING
) -> int:
    """A chatty library's level (uvicorn's, those of :data:`QUIET`): ``quiet``, or the
    ``level`` asked when it is higher: quieter than the gateway's own, never louder."""
    return max(quiet, logging.getLevelNamesMapping()[level.upper()])


def configure_logging(
    form: Literal["text", "json"], level: Literal["debug", "info", "warning", "error"]
) -> None:
    """Install the root handler (stderr) for the serving process."""
    handler = logging.StreamHandler()
    if form == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(TextFormatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers = [handler]
    wanted = logging.getLevelNamesMapping()[level.upper()]
    root.setLevel(max(wanted, logging.INFO))
    logging.getLogger(OWN).setLevel(wanted)
    for name, quiet in QUIET.items():
        logging.getLogger(name).setLevel(quietened(level, quiet))
