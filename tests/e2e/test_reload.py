"""Config reloads through the real ``stateway serve``: ``SIGHUP`` and the admin route
swap a route's upstream while runs admitted before finish on theirs, a broken file keeps
the last good generation, and start-up settings report that they need a restart."""

from __future__ import annotations

import asyncio
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

import aiohttp
import pytest
from openai import AsyncOpenAI, OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import GATEWAY_ANNOUNCEMENT, launch
from tests.e2e.configured import RunningGateway
from tests.e2e.routing import fake_log, fake_requests

ADMIN_KEY = "admin-key-for-tests"
AUTHORIZED = {"Authorization": f"Bearer {ADMIN_KEY}"}
STREAM_PACE_MS = 80
"""``[[slow]]`` of the streams under load: 25 words take about two seconds upstream, so
the six waves usually overlap wholly (nothing asserted depends on it)."""


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
        client = AsyncOpenAI(base_url=gateway.url + "/v1", api_key="x", max_retries=0)

        async def stream(mark: str, admitted: asyncio.Event) -> str:
            async with client.responses.stream(
                model="assistant", input=f"{mark} [[slow:{STREAM_PACE_MS}]] [[words:25]]"
            ) as events:
                async for event in events:
                    if event.type == "response.output_text.delta":
                        admitted.set()
                final = await events.get_final_response()
            assert final.output_text.endswith("w25")
            return final.status or ""

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
        await client.close()
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


FIRST_BYTE_WAIT = 2.0
"""``first_byte_timeout`` of generation 1's first candidate: what a pending failover waits
for, well past a reload's own time."""
PACED = "[[slow:100]] [[words:20]]"


def pair_routes(first: str, second: str) -> str:
    """Generation 1: route ``pair`` over ``a`` (strict first byte) then ``b``, and ``solo``
    on ``a`` alone (the Chat Completions fast path)."""
    return f"""
[[backends]]
name = "a"
url = "{first}"
first_byte_timeout = {FIRST_BYTE_WAIT}
[[backends]]
name = "b"
url = "{second}"
api = "responses"

[[routes]]
name = "pair"
[[routes.candidates]]
backend = "a"
model = "g1-a"
[[routes.candidates]]
backend = "b"
model = "g1-b"
priority = 1

[[routes]]
name = "solo"
[[routes.candidates]]
backend = "a"
model = "g1-solo"
"""


def replaced_routes(upstream: str) -> str:
    """Generation 2: backends ``a`` and ``b`` gone, both routes on ``c``."""
    return f"""
[[backends]]
name = "c"
url = "{upstream}"

[[routes]]
name = "pair"
[[routes.candidates]]
backend = "c"
model = "g2-c"

[[routes]]
name = "solo"
[[routes.candidates]]
backend = "c"
model = "g2-c"
"""


def wire_request(frontend: str, model: str, text: str) -> tuple[str, dict[str, Any]]:
    messages = [{"role": "user", "content": text}]
    match frontend:
        case "responses":
            return "/v1/responses", {"model": model, "input": text, "stream": True}
        case "chat":
            return "/v1/chat/completions", {"model": model, "messages": messages, "stream": True}
        case _:
            body = {"model": model, "messages": messages, "max_tokens": 64, "stream": True}
            return "/v1/messages", body


STREAM_END = {"responses": "response.completed", "chat": "[DONE]", "messages": "message_stop"}
"""What each frontend's successful stream ends with."""


def ending(text: str) -> str:
    """An event stream's last event: its ``type``, or ``[DONE]``."""
    last = [line for line in text.splitlines() if line.startswith("data: ")][-1]
    data = last.removeprefix("data: ")
    return data if data == "[DONE]" else str(json.loads(data)["type"])


async def test_sighup_removing_the_backends_leaves_every_frontends_streams_whole(
    tmp_path: Path, fake_upstream: str, second_upstream: str
) -> None:
    """Streams of each frontend (Chat both translated and relayed by the fast path) are
    under way, and one request waits for its first candidate's first byte, when a reload
    fails (the file gone) and then one removes both backends they use. Each stream
    finishes on generation 1; the waiting one fails over to generation 1's second
    candidate; new requests go to generation 2."""
    with serving(tmp_path, pair_routes(fake_upstream, second_upstream)) as gateway:
        streams = [
            ("responses", "pair"),
            ("chat", "pair"),
            ("chat", "solo"),  # the fast path: one Chat candidate, no gateway tools
            ("messages", "pair"),
        ]

        async def stream(path: str, body: dict[str, Any], admitted: asyncio.Event) -> str:
            async with (
                aiohttp.ClientSession() as session,
                session.post(gateway.url + path, json=body) as response,
            ):
                assert response.status == 200
                text = ""
                async for line in response.content:
                    text += line.decode()
                    if "w1 " in text:
                        admitted.set()
                return text

        admitted = [asyncio.Event() for _ in streams]
        tasks = []
        for (frontend, model), event in zip(streams, admitted, strict=True):
            path, body = wire_request(frontend, model, f"{marker()} {PACED}")
            tasks.append(asyncio.create_task(stream(path, body, event)))
        waiting = marker()
        path, body = wire_request("responses", "pair", f"{waiting} [[silence:10000]] [[only:g1-a]]")
        pending = asyncio.create_task(stream(path, body, asyncio.Event()))
        await asyncio.gather(*(event.wait() for event in admitted))
        for _ in range(600):  # bounded: until the first candidate holds the request
            if fake_requests(fake_upstream, waiting):
                break
            await asyncio.sleep(0.01)

        (tmp_path / "stateway.toml").unlink()  # mid-rewrite, say: refused, nothing changes
        os.kill(gateway.pid, signal.SIGHUP)
        failed = await asyncio.to_thread(
            await_status, gateway, lambda s: s["last_error"] is not None
        )
        assert "cannot read config file" in failed["last_error"]
        assert (failed["generation"], failed["retiring"]) == (1, [])
        assert "config reload failed; generation 1 serves on" in gateway.log.read_text()

        sighup(gateway, tmp_path, replaced_routes(second_upstream))
        reloaded = await asyncio.to_thread(await_status, gateway, lambda s: s["generation"] == 2)
        assert reloaded["last_error"] is None
        assert reloaded["retiring"] == [1]
        assert not pending.done()  # still waiting for its first byte on generation 1

        finished = await asyncio.gather(*tasks)
        for (frontend, _), text in zip(streams, finished, strict=True):
            assert "w20" in text, text
            assert ending(text) == STREAM_END[frontend], text
            assert '"error":{' not in text
        failed_over = await pending
        assert ending(failed_over) == "response.completed"
        assert f"Hello! You said: {waiting}" in failed_over
        assert [r["body"]["model"] for r in fake_requests(second_upstream, waiting)] == ["g1-b"]

        fresh = marker()
        with sdk(gateway) as client:
            assert client.responses.create(model="pair", input=fresh).status == "completed"
        assert [r["body"]["model"] for r in fake_requests(second_upstream, fresh)] == ["g2-c"]
        await asyncio.to_thread(await_status, gateway, lambda s: s["retiring"] == [])
