"""Config reloads through the real ``stateway serve``: ``SIGHUP`` and the admin route
swap a route's upstream while runs admitted before finish on theirs, a broken file keeps
the last good generation, and start-up settings report that they need a restart."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import GATEWAY_ANNOUNCEMENT, child_env, launch
from tests.e2e.configured import RunningGateway
from tests.e2e.reloading import ADMIN_KEY, admin, await_status, marker, sdk, serving, sighup, status
from tests.e2e.routing import fake_log, fake_requests
from tests.support.mcp_server import hanging_server

STREAM_PACE_MS = 80
"""``[[slow]]`` of the streams under load: 25 words take about two seconds upstream, so
the six waves usually overlap wholly (nothing asserted depends on it)."""


def output_text(response: dict[str, Any]) -> str:
    """A Response object's text, as the SDK's ``output_text`` joins it."""
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


@pytest.fixture(scope="module")
def second_upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


def routes(upstream: str, model: str, *, head: str = "") -> str:
    """One route, ``assistant``, to ``model`` on ``upstream``; ``head`` goes first."""
    return f"""{head}
[[backends]]
name = "up"
url = "{upstream}"

[[routes]]
name = "assistant"
[[routes.candidates]]
backend = "up"
model = "{model}"
"""


def test_sighup_swaps_the_upstream_while_a_slow_run_finishes_on_the_old_one(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    old, new = marker(), marker()
    with serving(tmp_path, routes(fake_upstream, "old-model")) as gateway, sdk(gateway) as client:
        assert status(gateway)["generation"] == 1
        with client.responses.stream(
            model="assistant", input=f"{old} [[slow:150]] [[words:60]]"
        ) as stream:
            for event in stream:
                if event.type == "response.output_text.delta":
                    break  # the slow run is under way on generation 1
            # The file also names another database: the --database flag still wins.
            head = '[storage]\ndatabase = "sqlite:///ignored.db"\n'
            sighup(gateway, tmp_path, routes(second_upstream, "new-model", head=head))
            reloaded = await_status(gateway, lambda s: s["generation"] == 2)
            assert reloaded["last_error"] is None
            assert reloaded["restart_required"] == []
            assert reloaded["retiring"] == [1]  # the slow run holds generation 1

            fresh = client.responses.create(model="assistant", input=new)
            assert fresh.status == "completed"
            assert [r["body"]["model"] for r in fake_requests(second_upstream, new)] == [
                "new-model"
            ]
            assert fake_requests(fake_upstream, new) == []

            kinds = [event.type for event in stream]
            final = stream.get_final_response()
        assert kinds[-1] == "response.completed"
        assert final.output_text.endswith("w60")
        assert [r["body"]["model"] for r in fake_requests(fake_upstream, old)] == ["old-model"]
        assert fake_requests(second_upstream, old) == []
        await_status(gateway, lambda s: s["retiring"] == [])  # retired with its last run


def test_a_broken_file_keeps_the_last_good_generation(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    with serving(tmp_path, routes(fake_upstream, "kept-model")) as gateway, sdk(gateway) as client:
        sighup(gateway, tmp_path, "[[routes]\nname = ")
        failed = await_status(gateway, lambda s: s["last_error"] is not None)
        assert "not valid TOML" in failed["last_error"]
        assert failed["generation"] == 1

        broken = routes(second_upstream, "m").replace('backend = "up"', 'backend = "gone"')
        sighup(gateway, tmp_path, broken)
        failed = await_status(gateway, lambda s: "gone" in (s["last_error"] or ""))
        assert failed["generation"] == 1
        mark = marker()
        assert client.responses.create(model="assistant", input=mark).status == "completed"
        assert [r["body"]["model"] for r in fake_requests(fake_upstream, mark)] == ["kept-model"]
        assert "config reload failed; generation 1 serves on" in gateway.log.read_text()

        sighup(gateway, tmp_path, routes(second_upstream, "fixed-model"))
        fixed = await_status(gateway, lambda s: s["generation"] == 2)
        assert fixed["last_error"] is None


def test_a_reload_while_the_start_up_check_waits_keeps_its_pools_open(tmp_path: Path) -> None:
    """The start-up check of the upstreams (``GET /models``, beside serving) holds
    generation 1 until it ends: a ``SIGHUP`` while it waits on a slow model server does not
    close the pool it asks through, which would warn that the upstream failed."""
    with hanging_server() as url:
        text = routes(url.removesuffix("/mcp") + "/v1", "model")
        with serving(tmp_path, text) as gateway:
            sighup(gateway, tmp_path, text)
            reloaded = await_status(gateway, lambda s: s["generation"] == 2)
            assert reloaded["retiring"] == [1]  # the check still asks
            assert "failed at start-up" not in gateway.log.read_text()


def test_a_reloads_outcome_shows_in_the_metrics(tmp_path: Path, fake_upstream: str) -> None:
    with serving(tmp_path, routes(fake_upstream, "m")) as gateway:
        assert config_metrics(gateway) == {"generation": 1, "successful": 1, "restart": 0}
        sighup(gateway, tmp_path, "[[routes]\nname = ")
        await_status(gateway, lambda s: s["last_error"] is not None)
        assert config_metrics(gateway) == {"generation": 1, "successful": 0, "restart": 0}
        sighup(gateway, tmp_path, routes(fake_upstream, "m", head='[logging]\nlevel = "debug"'))
        await_status(gateway, lambda s: s["generation"] == 2)
        assert config_metrics(gateway) == {"generation": 2, "successful": 1, "restart": 1}


def config_metrics(gateway: RunningGateway) -> dict[str, int]:
    with urllib.request.urlopen(gateway.url + "/metrics") as reply:
        text = reply.read().decode()
    values = dict(
        line.split(" ", 1) for line in text.splitlines() if line.startswith("stateway_config_")
    )
    return {
        "generation": int(float(values["stateway_config_generation"])),
        "successful": int(float(values["stateway_config_last_reload_successful"])),
        "restart": int(float(values["stateway_config_restart_required"])),
    }


HANGUP_WHILE_IMPORTING = """
import os, signal, sys

class Hangup:  # a SIGHUP as the command imports its configuration's modules
    def find_spec(self, name, path=None, target=None):
        if name == "stateway.config":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGHUP)

sys.meta_path.insert(0, Hangup())
from stateway.cli import main
sys.exit(main())
"""


def test_a_sighup_while_the_command_is_still_importing_is_a_reload_once_serving(
    tmp_path: Path, second_upstream: str
) -> None:
    """Importing what ``stateway serve`` runs takes a second or so on a busy host: a
    ``SIGHUP`` in that time (README's ``pkill -HUP``) does not end the process either."""
    config = tmp_path / "stateway.toml"
    config.write_text(routes(second_upstream, "new-model"))
    command = [
        sys.executable, "-c", HANGUP_WHILE_IMPORTING, "serve", "--port", "0",
        "--config", str(config), "--database", f"sqlite:///{tmp_path / 'gateway.db'}",
    ]  # fmt: skip
    env = {"STATEWAY_ADMIN_KEY": ADMIN_KEY}
    with launch(command, GATEWAY_ANNOUNCEMENT, env=env, timeout=60) as launched:
        gateway = RunningGateway(launched.url, launched.pid, tmp_path / "none.log", config)
        assert await_status(gateway, lambda s: s["generation"] == 2)["last_error"] is None


def test_a_sighup_while_starting_up_is_a_reload_once_serving(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    """A SIGHUP's default action ends a process: one sent to every gateway on a host
    (README's ``pkill -HUP``) must not end one still starting (migrating its database),
    and the file it was sent for is read once that one serves."""
    config, database = tmp_path / "stateway.toml", tmp_path / "gateway.db"
    config.write_text(routes(fake_upstream, "old-model"))
    holder = sqlite3.connect(database, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # the gateway's first migration waits for it
    command = [
        sys.executable, "-m", "stateway", "serve", "--port", "0", "--config", str(config),
        "--database", f"sqlite:///{database}",
    ]  # fmt: skip
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=child_env({"STATEWAY_ADMIN_KEY": ADMIN_KEY}),
    )
    try:
        await_opened(process.pid, database)  # migrating: its configuration read
        config.write_text(routes(second_upstream, "new-model"))
        os.kill(process.pid, signal.SIGHUP)
        holder.execute("ROLLBACK")
        assert process.stdout is not None
        while GATEWAY_ANNOUNCEMENT not in (line := process.stdout.readline()):
            assert line, f"the gateway ended with {process.wait()}"
        url = line.split(GATEWAY_ANNOUNCEMENT, 1)[1].strip()
        gateway = RunningGateway(url, process.pid, tmp_path / "none.log", database)
        assert await_status(gateway, lambda s: s["generation"] == 2)["last_error"] is None
        mark = marker()
        assert sdk(gateway).responses.create(model="assistant", input=mark).status == "completed"
        assert [r["body"]["model"] for r in fake_requests(second_upstream, mark)] == ["new-model"]
    finally:
        holder.close()
        process.terminate()
        process.communicate(timeout=30)


def await_opened(pid: int, path: Path) -> None:
    """Poll until process ``pid`` holds ``path`` open (bounded: a hang fails)."""
    for _ in range(600):
        descriptors = Path(f"/proc/{pid}/fd")
        with contextlib.suppress(OSError):
            if any(os.readlink(fd) == str(path) for fd in descriptors.iterdir()):
                return
        time.sleep(0.05)
    raise AssertionError(f"process {pid} never opened {path}")


def test_the_admin_routes(tmp_path: Path, fake_upstream: str, second_upstream: str) -> None:
    (tmp_path / "off").mkdir()
    with serving(tmp_path / "off", routes(fake_upstream, "m")) as gateway:
        assert admin(gateway, "POST", "/admin/config/reload")[0] == 404  # not enabled
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            code, body = admin(gateway, "GET", "/admin/config/status", headers)
            assert (code, body["error"]["code"]) == (401, "invalid_api_key")
        assert status(gateway)["generation"] == 1

    enabled = "[admin]\nreload_endpoint = true\n"
    directory = tmp_path / "on"
    directory.mkdir()
    with serving(directory, routes(fake_upstream, "m", head=enabled)) as gateway:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            assert admin(gateway, "POST", "/admin/config/reload", headers)[0] == 401
        assert status(gateway)["generation"] == 1  # neither reloaded

        (directory / "stateway.toml").write_text(routes(second_upstream, "m2", head=enabled))
        code, reloaded = admin(gateway, "POST", "/admin/config/reload")
        assert (code, reloaded["generation"]) == (200, 2)
        mark = marker()
        with sdk(gateway) as client:
            client.responses.create(model="assistant", input=mark)
        assert [r["body"]["model"] for r in fake_requests(second_upstream, mark)] == ["m2"]

        bad = routes(second_upstream, "m3", head=enabled).replace("[[routes]]", "[[routes]]\nx=1")
        (directory / "stateway.toml").write_text(bad)
        code, rejected = admin(gateway, "POST", "/admin/config/reload")
        assert (code, rejected["error"]["code"]) == (400, "config_invalid")
        after = status(gateway)
        assert after["generation"] == 2
        assert "routes.0.x" in after["last_error"]


def test_a_changed_database_url_needs_a_restart(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    first, second = tmp_path / "first.db", tmp_path / "second.db"
    head = f'[storage]\ndatabase = "sqlite:///{first}"\n'
    text = routes(fake_upstream, "m", head=head)
    with serving(tmp_path, text, database_flag=False) as gateway, sdk(gateway) as client:
        moved = f'[storage]\ndatabase = "sqlite:///{second}"\n'
        sighup(gateway, tmp_path, routes(second_upstream, "m2", head=moved))
        reloaded = await_status(gateway, lambda s: s["generation"] == 2)
        assert reloaded["restart_required"] == ["storage.database"]
        mark = marker()
        response = client.responses.create(model="assistant", input=mark)
        assert [r["body"]["model"] for r in fake_requests(second_upstream, mark)] == ["m2"]
        stored = RunningGateway(gateway.url, gateway.pid, gateway.log, first).stored(response.id)
        assert stored["status"] == "completed"  # still the database it started with
        assert not second.exists()
        assert "restart: storage.database" in gateway.log.read_text()


async def test_streams_under_load_finish_on_the_generation_they_started_on(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    """200 concurrent streams and five reloads: the streams start in six waves, one per
    generation, each wave admitted (its first delta read) before the next ``SIGHUP``.
    Every stream finishes on the upstream model of the generation it was admitted under,
    none fails, and each wave takes the routes of the newest generation."""
    streams, reloads = 200, 5
    waves = [streams // (reloads + 1) + (n < streams % (reloads + 1)) for n in range(reloads + 1)]
    upstreams = [fake_upstream, second_upstream]
    prefix = marker()  # the fakes count requests by model: these names are this test's

    def upstream(generation: int) -> str:
        return upstreams[(generation - 1) % 2]

    def model(generation: int) -> str:
        return f"{prefix}-gen-{generation}"

    with serving(tmp_path, routes(upstream(1), model(1))) as gateway:
        # Read as plain SSE: the SDK's own work on the 5,000-odd events took most of the
        # test's time, and the streams are the gateway's, whoever reads them.
        limits = httpx2.Limits(max_connections=streams)
        client = httpx2.AsyncClient(base_url=gateway.url, timeout=60, limits=limits)

        async def stream(mark: str, admitted: asyncio.Event) -> str:
            text = f"{mark} [[slow:{STREAM_PACE_MS}]] [[words:25]]"
            body = {"model": "assistant", "input": text, "stream": True}
            events: list[dict[str, Any]] = []
            async with client.stream("POST", "/v1/responses", json=body) as answer:
                async for line in answer.aiter_lines():
                    if line.startswith("data: "):
                        events.append(json.loads(line[6:]))
                        if events[-1]["type"] == "response.output_text.delta":
                            admitted.set()
            assert events[-1]["type"] == "response.completed"
            final = events[-1]["response"]
            assert output_text(final).endswith("w25")
            return str(final["status"])

        started: list[tuple[int, str, asyncio.Task[str]]] = []
        for generation, size in enumerate(waves, start=1):
            admitted = [asyncio.Event() for _ in range(size)]
            for event in admitted:
                mark = marker()
                started.append((generation, mark, asyncio.create_task(stream(mark, event))))
            await asyncio.gather(*(event.wait() for event in admitted))
            if generation <= reloads:
                sighup(gateway, tmp_path, routes(upstream(generation + 1), model(generation + 1)))
                await asyncio.to_thread(
                    await_status, gateway, lambda s, n=generation + 1: s["generation"] == n
                )
        finals = await asyncio.gather(*(task for _, _, task in started))
        await client.aclose()
        assert finals == ["completed"] * streams
        logs = {url: fake_log(url) for url in upstreams}
        for generation, size in enumerate(waves, start=1):
            for url in upstreams:
                due = size if url == upstream(generation) else 0
                assert logs[url]["counts"].get(model(generation), 0) == due
        models_by_mark: dict[str, list[str]] = {}
        for url in upstreams:
            for entry in logs[url]["data"]:
                text = json.dumps(entry["body"])
                for _, mark, _ in started:
                    if mark in text:
                        models_by_mark.setdefault(mark, []).append(entry["body"]["model"])
        for generation, mark, _ in started:
            assert models_by_mark[mark] == [model(generation)]
        await asyncio.to_thread(await_status, gateway, lambda s: s["retiring"] == [])
