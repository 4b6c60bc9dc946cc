"""A real ``stateway serve`` with a routes file over two fake upstreams (and a dead
one), its database at hand, and the fakes' request logs."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from stateway.launch import GATEWAY_ANNOUNCEMENT, launch
from tests.e2e.configured import RunningGateway


def dead_url() -> str:
    """A loopback URL nothing listens on (connect refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def routes_file(first: str, second: str, dead: str) -> str:
    return f"""
[[backends]]
name = "a"
url = "{first}"
[[backends]]
name = "b"
url = "{second}"
api = "responses"
[[backends]]
name = "dead"
url = "{dead}"
connect_timeout = 2

[aliases]
"smart" = "assistant"

[[routes]]
name = "assistant"
[[routes.candidates]]
backend = "a"
model = "a-model"
[[routes.candidates]]
backend = "b"
model = "b-model"
priority = 1

[[routes]]
name = "cutting"
[[routes.candidates]]
backend = "a"
model = "cut-model"
[[routes.candidates]]
backend = "b"
model = "b-model"
priority = 1

[[routes]]
name = "renamed"
[[routes.candidates]]
backend = "a"
model = "renamed-model"
[[routes.candidates]]
backend = "b"
model = "b-model"
priority = 1

[[routes]]
name = "vision"
[[routes.candidates]]
backend = "a"
model = "a-model"
capabilities = {{ images = false }}
[[routes.candidates]]
backend = "b"
model = "b-model"

[[routes]]
name = "text-only"
[[routes.candidates]]
backend = "a"
model = "a-model"
capabilities = {{ images = false }}

[[routes]]
name = "dead-first"
[[routes.candidates]]
backend = "dead"
model = "dead-model"
[[routes.candidates]]
backend = "b"
model = "b-model"
priority = 1

[[routes]]
name = "guarded"
[[routes.candidates]]
backend = "a"
model = "guarded-model"
[[routes.stages]]
name = "tool_filter"
on_error = "closed"
options = {{ deny = ["rm_rf"] }}
[[routes.stages]]
name = "param_clamp"
options = {{ max_output_tokens = 7 }}

[[routes]]
name = "spread"
[[routes.candidates]]
backend = "a"
model = "a-spread"
[[routes.candidates]]
backend = "b"
model = "b-spread"
"""


@contextmanager
def routed_gateway(directory: Path, text: str, *extra: str) -> Iterator[RunningGateway]:
    config = directory / "stateway.toml"
    config.write_text(text)
    database = directory / "gateway.db"
    log = directory / "gateway.log"
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0"]
    command += ["--config", str(config), "--database", f"sqlite:///{database}", *extra]
    with (
        log.open("w") as stderr,
        launch(command, GATEWAY_ANNOUNCEMENT, stderr=stderr, timeout=60) as launched,
    ):
        yield RunningGateway(launched.url, launched.pid, log, database)


def fake_log(upstream: str) -> dict[str, Any]:
    """``upstream``'s request log: its last 200 requests (``data``) and every request
    counted by the model it asked for (``counts``)."""
    with urllib.request.urlopen(upstream.removesuffix("/v1") + "/_fake/requests") as reply:
        logged: dict[str, Any] = json.loads(reply.read())
    return logged


def fake_requests(upstream: str, marker: str) -> list[dict[str, Any]]:
    """The generation requests ``upstream`` logged whose body mentions ``marker``."""
    logged: list[dict[str, Any]] = fake_log(upstream)["data"]
    return [entry for entry in logged if marker in json.dumps(entry["body"])]


def fake_count(upstream: str, model: str) -> int:
    """How many generation requests for ``model`` ``upstream`` received."""
    return int(fake_log(upstream)["counts"].get(model, 0))
