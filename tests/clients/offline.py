"""A network namespace with nothing but loopback, and stateway's servers running inside it.

Real clients phone home (telemetry, plugin and model catalogs). Running them inside a fresh
network namespace (``unshare -n``, root only) makes "offline" a fact, not a setting: no
interface but ``lo`` exists there. The fake upstream, the gateway and a recording hop run
in the same namespace (``nsenter --net``), so the client reaches them on 127.0.0.1 and
nothing else; the test process reads their logs through the shared file system.

A namespace is held open by a ``cat`` reading the test's pipe: it ends with the session,
or with the test process if that dies.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from stateway.fake_upstream.server import ANNOUNCEMENT as FAKE_ANNOUNCEMENT
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch
from tests.clients.recording_hop import ANNOUNCEMENT as HOP_ANNOUNCEMENT
from tests.support.fake_search import ANNOUNCEMENT as SEARCH_ANNOUNCEMENT

REPO = Path(__file__).resolve().parents[2]
INSTALL_CLIENTS = REPO / "scripts" / "install-clients"
_HOP = Path(__file__).with_name("recording_hop.py")
_TOOLS = ("unshare", "nsenter", "ip")


def unavailable(reason: str) -> None:
    """Skip, with ``reason`` — except in CI (``CI`` set), where client tests must run."""
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must run the client tests", pytrace=False)
    pytest.skip(f"{reason} (deselect with -m 'not clients')")


def install_client(name: str) -> Path:
    """``scripts/install-clients NAME``: the executable, installed once into the cache."""
    if shutil.which("npm") is None:
        unavailable(f"npm is missing, so the {name} client cannot be installed")
    result = subprocess.run(
        [str(INSTALL_CLIENTS), name], capture_output=True, text=True, timeout=900, check=False
    )
    if result.returncode != 0:
        unavailable(f"installing the {name} client failed:\n{result.stderr}")
    installed, path = result.stdout.split()
    assert installed == name, result.stdout
    return Path(path)


@contextmanager
def loopback_namespace() -> Iterator[str]:
    """A new network namespace with ``lo`` up; yields its ``/proc/PID/ns/net`` path."""
    missing = [tool for tool in _TOOLS if shutil.which(tool) is None]
    if missing:
        unavailable(f"{', '.join(missing)} missing (util-linux, iproute2)")
    if os.geteuid() != 0:
        unavailable("an offline network namespace (unshare -n) needs root")
    script = "ip link set lo up && echo ready && exec cat >/dev/null"
    holder = subprocess.Popen(
        ["unshare", "--net", "--", "sh", "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert holder.stdin is not None
    assert holder.stdout is not None
    assert holder.stderr is not None
    try:
        if holder.stdout.readline().strip() != "ready":
            holder.wait(timeout=10)
            unavailable(f"unshare -n failed: {holder.stderr.read().strip()}")
        yield f"/proc/{holder.pid}/ns/net"
    finally:
        holder.stdin.close()
        try:
            holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()
        holder.stdout.close()
        holder.stderr.close()


def inside(namespace: str, command: Sequence[str]) -> list[str]:
    """``command`` run inside ``namespace`` (nsenter execs it: the pid stays the command's)."""
    return ["nsenter", f"--net={namespace}", "--", *command]


@dataclass(frozen=True)
class OfflineGateway:
    """The gateway in front of the fake upstream, behind a recording hop, all offline."""

    namespace: str
    url: str
    """The hop's ``http://127.0.0.1:PORT`` (clients talk to this)."""
    requests_log: Path
    """What clients sent: one JSON line per request (see ``recording_hop``)."""
    gateway_log: Path
    upstream: str
    """The model server's ``http://127.0.0.1:PORT/v1`` (the fake upstream's, but for the
    tests of llama-server), reachable inside the namespace only."""

    def requests_since(self, offset: int) -> list[dict[str, Any]]:
        """The requests recorded after byte ``offset`` of the log, each with the status of
        its answer (``status``)."""
        with self.requests_log.open("rb") as log:
            log.seek(offset)
            return [json.loads(line) for line in log.read().splitlines()]

    def log_size(self) -> int:
        return self.requests_log.stat().st_size

    def answers_size(self) -> int:
        answers = self._answers_log()
        return answers.stat().st_size if answers.exists() else 0

    def answers_since(self, offset: int, requests: list[dict[str, Any]]) -> list[str]:
        """The bodies of the answers to ``requests`` (recorded after byte ``offset`` of the
        answers log, which :meth:`answers_size` gave before they were sent), once the hop
        has written one for each request answered: it writes one when done relaying it,
        which may be after its client read it all and went on (bounded wait). A long
        answer's line may be read half-written: only whole lines are taken."""
        # an upgrade (101) is tunnelled, no answer written
        expected = sum(1 for request in requests if request["status"] not in (None, 101))
        deadline = time.monotonic() + 30
        while True:
            with self._answers_log().open("rb") as log:
                log.seek(offset)
                written = log.read()
            whole = written[: written.rfind(b"\n") + 1]  # a line still being written waits
            answers = [json.loads(line) for line in whole.splitlines()]
            if len(answers) >= expected or time.monotonic() > deadline:
                return answers
            time.sleep(0.05)

    def _answers_log(self) -> Path:
        return Path(f"{self.requests_log}.answers")

    def await_window(self, window: int, model: str = "fake-model") -> None:
        """Wait (bounded) until the gateway lists ``window`` as ``model``'s, which it learns
        from the model server's listing beside serving; asked from inside the namespace."""
        asked = [sys.executable, "-c", _LEARNED, self.url, model, str(window)]
        subprocess.run(inside(self.namespace, asked), timeout=30, check=True)

    def take_upstream_requests(self) -> list[dict[str, Any]]:
        """What the gateway sent the fake upstream since the last take (its generation
        requests, each ``{"path", "body", "headers"}``: ``GET /_fake/requests``), which
        the fake then forgets; asked from inside the namespace."""
        url = self.upstream.removesuffix("/v1") + "/_fake/requests"
        result = subprocess.run(
            inside(self.namespace, [sys.executable, "-c", _TAKE_REQUESTS, url]),
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        taken: list[dict[str, Any]] = json.loads(result.stdout)["data"]
        return taken


_LEARNED = """
import json, sys, time, urllib.request
url, model, window = sys.argv[1:]
asked = urllib.request.Request(
    f"{url}/v1/models/{model}", headers={"anthropic-version": "2023-06-01"}
)
for _ in range(200):
    if json.load(urllib.request.urlopen(asked)).get("max_input_tokens") == int(window):
        sys.exit(0)
    time.sleep(0.05)
sys.exit("the gateway did not learn the window")
"""

_TAKE_REQUESTS = (
    "import sys, urllib.request as r; "
    "sys.stdout.write(r.urlopen(sys.argv[1]).read().decode()); "
    "r.urlopen(r.Request(sys.argv[1], method='DELETE')).close()"
)


@contextmanager
def fake_search(namespace: str) -> Iterator[dict[str, str]]:
    """The fake search API (``tests.support.fake_search``) inside ``namespace``; yields the
    gateway's environment for searching it with SearXNG's API (so Codex's live
    ``web_search`` tool is accepted, and Claude Code's WebSearch gets results)."""
    command = inside(namespace, [sys.executable, "-m", "tests.support.fake_search"])
    with launch(command, SEARCH_ANNOUNCEMENT) as search:
        yield {"STATEWAY_WEB_SEARCH_PROVIDER": "searxng", "STATEWAY_SEARXNG_URL": search.url}


STRICT_TEMPLATE = ("--system-first",)
"""Fake upstream options: its Chat wire refuses a system message anywhere but first, as the
chat templates of many open models do, so a gateway that forwards a client's late system
message (Claude Code sends one) fails here as it would on vLLM."""


@contextmanager
def offline_gateway(
    namespace: str,
    api: str,
    directory: Path,
    env: Mapping[str, str] | None = None,
    fake_options: Sequence[str] = STRICT_TEMPLATE,
    backend: Mapping[str, object] | None = None,
) -> Iterator[OfflineGateway]:
    """Start the fake upstream (with ``fake_options``) inside ``namespace``, and the
    gateway over it (:func:`gateway_over`, its backend's further ``backend`` settings);
    stop them when the block exits."""
    fake_command = [sys.executable, "-m", "stateway.fake_upstream", "--port", "0", *fake_options]
    with (
        launch(inside(namespace, fake_command), FAKE_ANNOUNCEMENT) as fake,
        gateway_over(namespace, fake.url, api, directory, env, backend) as running,
    ):
        yield running


@contextmanager
def gateway_over(
    namespace: str,
    upstream: str,
    api: str,
    directory: Path,
    env: Mapping[str, str] | None = None,
    backend: Mapping[str, object] | None = None,
) -> Iterator[OfflineGateway]:
    """Start ``stateway serve`` (SQLite, the one upstream ``upstream``: its
    ``http://127.0.0.1:PORT/v1`` inside ``namespace``, of wire ``api``; ``env`` added to
    its environment; ``backend``: more settings of that backend, in a configuration file)
    and the recording hop inside ``namespace``; stop them when the block exits."""
    requests_log = directory / "client-requests.jsonl"
    requests_log.touch()
    gateway_log = directory / "gateway.log"
    python = sys.executable
    with ExitStack() as stack:
        serve = [python, "-m", "stateway", "serve", "--port", "0"]
        serve += _backend_options(upstream, api, directory, backend)
        serve += ["--database", f"sqlite:///{directory / 'gw.db'}"]
        stderr = stack.enter_context(gateway_log.open("w"))
        gateway = stack.enter_context(
            launch(
                inside(namespace, serve), GATEWAY_ANNOUNCEMENT, env=env, stderr=stderr, timeout=60
            )
        )
        hop_command = [python, str(_HOP), gateway.url, str(requests_log)]
        hop = stack.enter_context(launch(inside(namespace, hop_command), HOP_ANNOUNCEMENT))
        yield OfflineGateway(namespace, hop.url, requests_log, gateway_log, upstream)


def _backend_options(
    upstream: str, api: str, directory: Path, backend: Mapping[str, object] | None
) -> list[str]:
    """``serve``'s options for its one backend: flags, or a configuration file holding
    ``backend``'s settings too (values JSON-encoded, which TOML reads alike)."""
    if not backend:
        return ["--upstream", upstream, "--upstream-api", api]
    settings = {"name": "default", "url": upstream, "api": api, **backend}
    lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
    config = directory / "stateway.toml"
    config.write_text("[[backends]]\n" + "\n".join(lines) + "\n")
    return ["--config", str(config)]


class GatewayPool:
    """The session's offline gateways, one per upstream wire, each started when first asked
    for and shared by every client test over that wire (each test reads only the requests
    of its own run)."""

    def __init__(
        self,
        namespace: str,
        stack: ExitStack,
        directory: Callable[[str], Path],
        env: Mapping[str, str] | None = None,
    ) -> None:
        self._namespace = namespace
        self._stack = stack
        self._directory = directory
        self._env = env
        self._running: dict[str, OfflineGateway] = {}

    def get(self, api: str) -> OfflineGateway:
        if api not in self._running:
            gateway = offline_gateway(self._namespace, api, self._directory(api), self._env)
            self._running[api] = self._stack.enter_context(gateway)
        return self._running[api]
