"""A real ``stateway serve`` reloading its configuration file: started with the admin
credential, its config status read over the admin route, reloads sent as ``SIGHUP``."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from openai import OpenAI

from stateway.launch import GATEWAY_ANNOUNCEMENT, launch
from tests.e2e.configured import RunningGateway

ADMIN_KEY = "admin-key-for-tests"
AUTHORIZED = {"Authorization": f"Bearer {ADMIN_KEY}"}


@contextmanager
def serving(directory: Path, text: str, *, database_flag: bool = True) -> Iterator[RunningGateway]:
    """``stateway serve --config FILE`` (and ``--database`` unless told not to), with the
    admin credential in its environment."""
    config = directory / "stateway.toml"
    config.write_text(text)
    database = directory / "gateway.db"
    log = directory / "gateway.log"
    command = [sys.executable, "-m", "stateway", "serve", "--port", "0", "--config", str(config)]
    if database_flag:
        command += ["--database", f"sqlite:///{database}"]
    env = {"STATEWAY_ADMIN_KEY": ADMIN_KEY}
    with (
        log.open("w") as stderr,
        launch(command, GATEWAY_ANNOUNCEMENT, env=env, stderr=stderr, timeout=60) as launched,
    ):
        yield RunningGateway(launched.url, launched.pid, log, database)


def admin(
    gateway: RunningGateway, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, Any]]:
    """An admin route's status and JSON body."""
    request = urllib.request.Request(
        gateway.url + path, method=method, headers=AUTHORIZED if headers is None else headers
    )
    try:
        with urllib.request.urlopen(request) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, json.loads(error.read())


def status(gateway: RunningGateway) -> dict[str, Any]:
    code, body = admin(gateway, "GET", "/admin/config/status")
    assert code == 200, body
    return body


def await_status(gateway: RunningGateway, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """Poll the status until ``done`` holds (bounded: a hang fails, nothing is timed)."""
    for _ in range(600):
        current = status(gateway)
        if done(current):
            return current
        time.sleep(0.05)
    raise AssertionError(f"the status never got there: {current}")


def sighup(gateway: RunningGateway, directory: Path, text: str) -> None:
    (directory / "stateway.toml").write_text(text)
    os.kill(gateway.pid, signal.SIGHUP)


def sdk(gateway: RunningGateway) -> OpenAI:
    return OpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)


def marker() -> str:
    return uuid.uuid4().hex[:12]
