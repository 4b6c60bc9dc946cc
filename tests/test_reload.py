"""Reloading: the start-up tables are classified as needing a restart and kept, flags
and environment keep their precedence, a failed compile keeps the generation serving,
and a reload compiles with the very function start-up and check-config use."""

from __future__ import annotations

import asyncio
import gc
import logging
from pathlib import Path
from typing import cast

import pytest

from stateway.app import compile_generation
from stateway.backends.anthropic import AnthropicBackend
from stateway.config import Config, ConfigError, Overrides
from stateway.core.backend import AdvertisedWindows
from stateway.core.errors import ConfigRejected
from stateway.core.generations import Generations
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from stateway.core.routing.probe import HealthProber
from stateway.core.routing.windows import WindowDiscovery
from stateway.reload import Compiled, Reloader, keep_started, restart_required
from stateway.server_config import ServerConfig
from tests.core.fakes import MemoryStore, ScriptedBackend

BACKEND = """
[[backends]]
name = "{name}"
url = "http://127.0.0.1:9/v1"
models = ["m"]
"""


def config(**tables: object) -> Config:
    return Config.model_validate(tables)


def write(path: Path, text: str) -> Overrides:
    path.write_text(text)
    return Overrides(config=str(path))


def test_each_changed_startup_setting_is_reported() -> None:
    started = config()
    loaded = config(
        server={"port": 9999, "max_body_bytes": 4096},
        storage={"database": "sqlite:///elsewhere.db"},
        coordination={"redis_url": "redis://127.0.0.1:6379/0"},
        admin={"reload_endpoint": True},
        loop={"max_rounds": 3},
    )
    assert restart_required(started, loaded) == (
        "server.port",
        "server.max_body_bytes",
        "storage.database",
        "coordination.redis_url",
        "admin.reload_endpoint",
    )
    assert restart_required(started, config(loop={"max_rounds": 3})) == ()


def test_a_new_sealing_key_needs_a_restart_and_is_not_applied() -> None:
    key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
    loaded = config(security={"sealing_key": key})
    assert restart_required(config(), loaded) == ("security.sealing_key",)
    assert keep_started(config(), loaded).security.sealing_key is None


@pytest.mark.parametrize("name", sorted(ServerConfig.model_fields))
def test_every_server_setting_needs_a_restart(name: str) -> None:
    changed = {
        "host": "0.0.0.0",
        "port": 1,
        "max_body_bytes": 2048,
        "request_body_timeout": 1.0,
        "max_header_bytes": 8192,
        "header_timeout": 1.0,
        "keep_alive_timeout": 30,
        "send_timeout": 1.0,
        "max_input_items": 1,
        "drain_timeout": 1.0,
        "max_queued_requests": 1,
        "allowed_hosts": ["example.test"],
        "cors_origins": ["https://app.example.test"],
    }
    assert restart_required(config(), config(server={name: changed[name]})) == (f"server.{name}",)


def test_the_startup_tables_stay_and_the_rest_applies() -> None:
    started = config(server={"port": 1234}, storage={"database": "sqlite:///a.db"})
    loaded = config(
        server={"port": 5678}, storage={"database": "sqlite:///b.db"}, loop={"max_rounds": 2}
    )
    kept = keep_started(started, loaded)
    assert kept.server.port == 1234
    assert kept.storage.database == "sqlite:///a.db"
    assert kept.loop.max_rounds == 2


def test_a_reload_compiles_the_file_again_keeping_startup_settings(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    flags = write(path, '[storage]\ndatabase = "sqlite:///a.db"\n' + BACKEND.format(name="a"))
    started = compile_generation(flags)
    path.write_text('[storage]\ndatabase = "sqlite:///b.db"\n' + BACKEND.format(name="b"))
    reloaded = compile_generation(flags, started)
    assert reloaded.restart_required == ("storage.database",)
    assert reloaded.config.storage.database == "sqlite:///a.db"  # nothing applied from it
    assert [b.name for b in reloaded.router.backends] == ["b"]  # the rest applies
    assert reloaded.waiting_room is started.waiting_room  # process-wide, from [server]


def test_a_reloaded_backend_keeps_its_connection_slots(tmp_path: Path) -> None:
    """max_connections bounds a backend's calls across generations: the runs still on the
    superseded one and the new one's requests wait in one line."""
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a") + "max_connections = 2\n")
    started = compile_generation(flags)
    reloaded = compile_generation(flags, started)
    [before], [after] = started.router.backends, reloaded.router.backends
    assert after is not before  # a generation's own backend and pool
    assert after._client._slots is before._client._slots  # type: ignore[attr-defined]
    path.write_text(BACKEND.format(name="a") + "max_connections = 3\n")
    widened = compile_generation(flags, started).router.backends[0]
    assert widened._client._slots is not before._client._slots  # type: ignore[attr-defined]


@pytest.mark.usefixtures("young_heap")
def test_reloads_changing_a_backends_limits_leave_no_slots_behind(tmp_path: Path) -> None:
    """Each max_connections or pool_timeout is a queue of its own; once no generation
    uses one (retired, gone), the process's waiting room keeps nothing of it."""
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a"))
    started = compile_generation(flags)
    room = started.waiting_room
    for n in range(1, 21):
        limits = f"max_connections = {n}\npool_timeout = {n / 2}\n"
        path.write_text(BACKEND.format(name="a") + limits)
        reloaded = compile_generation(flags, started)
        assert room.queues == 2  # the first generation's, and this one's
        del reloaded  # superseded by the next, retired, dropped
        gc.collect()
    assert room.queues == 1  # the first generation's alone


def test_a_reload_applies_a_backends_first_token_timeout(tmp_path: Path) -> None:
    """Set, changed and unset again: each generation's client bounds the first output by
    what its file says, with no restart."""
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a"))
    started = compile_generation(flags)

    def bound(compiled: Compiled) -> float | None:
        client = compiled.router.backends[0]._client  # type: ignore[attr-defined]
        return cast(float | None, client.target.first_token_timeout)

    seen = []
    for setting in ("first_token_timeout = 5\n", "first_token_timeout = 2.5\n", ""):
        path.write_text(BACKEND.format(name="a") + setting)
        reloaded = compile_generation(flags, started)
        assert reloaded.restart_required == ()
        seen.append(bound(reloaded))
    assert bound(started) is None
    assert seen == [5.0, 2.5, None]


def test_learned_windows_outlive_a_reload_and_follow_the_servers_url(tmp_path: Path) -> None:
    """What a server advertised is the process's: a reload's candidates read it at once
    (and its discovery asks again), a backend moved to another URL starts unknown."""
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a"))
    started = compile_generation(flags)
    [candidate] = started.router.resolve("m").candidates
    assert started.discovery is not None
    assert [record for _, record in started.discovery.servers] == [candidate.learned]
    assert candidate.learned is not None
    candidate.learned.learn(AdvertisedWindows({"m": 8192}))
    reloaded = compile_generation(flags, started)
    assert reloaded.windows is started.windows
    assert reloaded.router.resolve("m").candidates[0].context_window == 8192
    assert reloaded.discovery is not None
    path.write_text(BACKEND.format(name="a").replace("127.0.0.1:9/", "127.0.0.1:10/"))
    assert (
        compile_generation(flags, started).router.resolve("m").candidates[0].context_window is None
    )


@pytest.mark.parametrize("setting", ["discover_context_window = false\n", "context_window = 100\n"])
def test_no_window_is_learned_when_discovery_is_off_or_one_is_configured(
    tmp_path: Path, setting: str
) -> None:
    compiled = compile_generation(write(tmp_path / "s.toml", BACKEND.format(name="a") + setting))
    assert compiled.discovery is None
    assert compiled.router.resolve("m").candidates[0].learned is None


def test_flags_and_environment_keep_their_precedence_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STATEWAY_MAX_BODY_BYTES", "65536")
    path = tmp_path / "stateway.toml"
    flags = Overrides(config=str(path), database="sqlite:///flag.db", port=7000)
    path.write_text(BACKEND.format(name="a"))
    started = compile_generation(flags)
    text = '[server]\nport = 1\nmax_body_bytes = 2048\n[storage]\ndatabase = "sqlite:///f.db"\n'
    path.write_text(text + BACKEND.format(name="a"))
    reloaded = compile_generation(flags, started)
    assert reloaded.restart_required == ()  # the flags and the environment still win
    assert reloaded.config.storage.database == "sqlite:///flag.db"
    assert reloaded.config.server.max_body_bytes == 65536


def test_the_reload_endpoint_needs_its_credential(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flags = write(tmp_path / "s.toml", '[admin]\nreload_endpoint = true\napi_key_env = "ADM"\n')
    monkeypatch.delenv("ADM", raising=False)
    with pytest.raises(ConfigError, match="ADM"):
        compile_generation(flags)
    monkeypatch.setenv("ADM", "secret")
    assert compile_generation(flags).config.admin.reload_endpoint


class Probed(ScriptedBackend):
    def __init__(self, name: str) -> None:
        super().__init__([])
        self.name = name
        self.probed = asyncio.Event()

    async def list_models(self) -> list[str]:
        self.probed.set()
        return ["m"]


def compiled(backend: ScriptedBackend, *, probe: bool = False, changed: str = "") -> Compiled:
    router = Router([BackendEntry(backend, {"m": "m"})])
    prober = HealthProber(router, 3600.0) if probe else None
    restart = (changed,) if changed else ()
    return Compiled(config(), router, Loop(MemoryStore()).tools, None, prober, restart)  # type: ignore[arg-type]


class Reloads:
    def __init__(self) -> None:
        self.first = Probed("first")
        started = compiled(self.first, probe=True)
        self.store = MemoryStore()
        self.generations = Generations(started.router, Loop(self.store))
        self.next: Compiled | Exception = ConfigError("unset")
        self.reloader = Reloader(started, self._compile, self._publish, self.generations)

    def _compile(self) -> Compiled:
        if isinstance(self.next, Exception):
            raise self.next
        return self.next

    def _publish(self, generation: Compiled) -> None:
        self.generations.publish(generation.router, Loop(self.store))


async def test_a_failed_reload_keeps_the_generation_and_reports_why() -> None:
    reloads = Reloads()
    reloads.next = ConfigError("route 'assistant': unknown backend 'gone'")
    with pytest.raises(ConfigRejected, match="unknown backend 'gone'") as rejected:
        await reloads.reloader.reload()
    assert rejected.value.status == 400
    status = reloads.reloader.status()
    assert status.generation == 1
    assert status.last_error == "route 'assistant': unknown backend 'gone'"
    reloads.reloader.reload_signalled()  # a signal's reload fails quietly: logged, reported
    assert reloads.reloader.status().generation == 1

    reloads.next = compiled(Probed("second"), changed="storage.database")
    status = await reloads.reloader.reload()
    assert status.generation == 2
    assert status.last_error is None
    assert status.restart_required == ("storage.database",)
    assert status.loaded_at == reloads.generations.current.loaded_at


async def test_an_unexpected_compile_failure_is_refused_and_reported() -> None:
    reloads = Reloads()
    reloads.next = TypeError("'int' object is not a mapping")
    with pytest.raises(ConfigRejected, match="TypeError: 'int' object is not a mapping"):
        await reloads.reloader.reload()
    reloads.reloader.reload_signalled()  # a signal's reload: no exception escapes either
    status = reloads.reloader.status()
    assert status.generation == 1
    assert status.last_error == "TypeError: 'int' object is not a mapping"


def test_the_status_before_any_reload_tells_of_no_failure_nor_pending_change() -> None:
    reloads = Reloads()
    status = reloads.reloader.status()
    assert (status.generation, status.last_error) == (1, None)
    assert (status.restart_required, status.retiring) == ((), ())


async def test_a_reload_logs_what_it_applied_what_waits_for_a_restart_and_why_it_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A ``SIGHUP``'s reload tells the operator in the log alone."""
    reloads = Reloads()
    reloads.next = compiled(Probed("second"))
    reloads.next.restart_required = ("server.port", "storage.database")
    with caplog.at_level(logging.INFO, logger="stateway.reload"):
        reloads.reloader.reload_signalled()
        reloads.next = ConfigError("route 'assistant': unknown backend 'gone'")
        reloads.reloader.reload_signalled()
        reloads.next = TypeError("'int' object is not a mapping")
        reloads.reloader.reload_signalled()
    records = [r for r in caplog.records if r.name == "stateway.reload"]
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.INFO, "config generation 2 serves new requests"),
        (
            logging.WARNING,
            "config changes not applied until a restart: server.port, storage.database",
        ),
        (
            logging.ERROR,
            "config reload failed; generation 2 serves on: "
            "route 'assistant': unknown backend 'gone'",
        ),
        (logging.ERROR, "config reload failed; generation 2 serves on"),
    ]
    assert records[-1].exc_info is not None


async def test_a_reload_before_serving_starts_its_work_once_serving_only() -> None:
    reloads = Reloads()
    second = Probed("second")
    reloads.next = compiled(second, probe=True)
    reloads.reloader.reload_now()
    for _ in range(5):
        await asyncio.sleep(0)
    assert not second.probed.is_set()  # not before serving starts
    reloads.reloader.start()
    await asyncio.wait_for(second.probed.wait(), 5)
    await reloads.reloader.aclose()
    assert not reloads.first.probed.is_set()  # the superseded generation's: never


def test_reloading_a_file_saved_in_another_encoding_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a"))
    started = compile_generation(flags)
    path.write_bytes(b"# caf\xe9\n" + BACKEND.format(name="b").encode())
    with pytest.raises(ConfigError, match="not UTF-8"):
        compile_generation(flags, started)


def test_reloading_a_jwks_refetch_cooldown_below_its_floor_is_refused(tmp_path: Path) -> None:
    """Without a cooldown each token naming a made-up key would fetch the provider's key
    set: refused on a reload as at start-up (though [auth] applies only at a restart)."""
    path = tmp_path / "stateway.toml"
    oidc = (
        "[auth.oidc]\nissuer = 'https://idp.example'\naudience = 'a'\ntenant_claim = 'o'\n"
        "jwks_refetch_cooldown = {}\n"
    )
    flags = write(path, BACKEND.format(name="a") + oidc.format(1))
    started = compile_generation(flags)
    path.write_text(BACKEND.format(name="a") + oidc.format(0))
    with pytest.raises(ConfigError, match=r"auth\.oidc\.jwks_refetch_cooldown"):
        compile_generation(flags, started)


@pytest.mark.parametrize("emptied", [b"", b"\n  \n"])
def test_reloading_an_emptied_file_is_refused_not_taken_for_the_defaults(
    tmp_path: Path, emptied: bytes
) -> None:
    """An editor or deploy tool that truncates the file before it writes leaves it empty
    for a moment: a SIGHUP then must not replace every route with the defaults."""
    path = tmp_path / "stateway.toml"
    flags = write(path, BACKEND.format(name="a"))
    started = compile_generation(flags)
    path.write_bytes(emptied)
    with pytest.raises(ConfigError, match="is empty; the running configuration is kept"):
        compile_generation(flags, started)
    defaults = compile_generation(Overrides()).config.backends
    path.write_text("# the defaults, on purpose\n")
    assert compile_generation(flags, started).config.backends == defaults
    path.write_bytes(emptied)
    assert compile_generation(flags).config.backends == defaults  # at start-up: the same


async def test_probing_follows_the_current_generation() -> None:
    reloads = Reloads()
    reloads.reloader.start()
    await reloads.first.probed.wait()
    second = Probed("second")
    reloads.next = compiled(second, probe=True)
    reloads.reloader.reload_signalled()
    await second.probed.wait()
    await reloads.reloader.aclose()
    third = Probed("third")
    reloads.next = compiled(third, probe=True)
    reloads.reloader.reload_signalled()  # shutting down: no more reloads
    assert reloads.generations.current.number == 2


class Asked(Probed):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.asked = asyncio.Event()

    async def advertised_windows(self) -> AdvertisedWindows:
        self.asked.set()
        return AdvertisedWindows()


def discovering(backend: Asked) -> Compiled:
    generation = compiled(backend)
    generation.discovery = WindowDiscovery([(backend, generation.windows.server("u"))], 1.0)
    return generation


async def test_windows_are_asked_for_once_serving_and_again_after_a_reload() -> None:
    first, second = Asked("first"), Asked("second")
    started = discovering(first)
    generations = Generations(started.router, Loop(MemoryStore()))
    reloader = Reloader(
        started,
        lambda: discovering(second),
        lambda generation: generations.publish(generation.router, Loop(MemoryStore())),
        generations,
    )
    await asyncio.sleep(0)
    assert not first.asked.is_set()  # not before serving starts
    reloader.start()
    await asyncio.wait_for(first.asked.wait(), 5)
    reloader.reload_now()
    await asyncio.wait_for(second.asked.wait(), 5)
    await reloader.aclose()


class Crashing(Asked):
    async def advertised_windows(self) -> AdvertisedWindows:
        self.asked.set()
        raise RuntimeError("an unforeseen failure")


async def test_background_work_that_crashes_is_logged_not_lost(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Nothing awaits a generation's background tasks: one that fails unexpectedly is
    logged as it ends, naming the work (asyncio would report it only once the task is
    collected, if ever)."""
    backend = Crashing("crashing")
    started = discovering(backend)
    generations = Generations(started.router, Loop(MemoryStore()))
    reloader = Reloader(
        started,
        lambda: discovering(backend),
        lambda generation: generations.publish(generation.router, Loop(MemoryStore())),
        generations,
    )
    with caplog.at_level(logging.ERROR, logger="stateway.reload"):
        reloader.start()
        await asyncio.wait_for(backend.asked.wait(), 5)
        for _ in range(3):  # the task ends, then its done callback runs
            await asyncio.sleep(0)
        await reloader.aclose()
    [record] = [r for r in caplog.records if r.name == "stateway.reload"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == "WindowDiscovery.run of the current generation failed"
    assert record.exc_info is not None
    assert "RuntimeError: an unforeseen failure" in logging.Formatter().formatException(
        record.exc_info
    )


class Hanging(Asked):
    """A model server that never answers: its asking ends only when cancelled."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.ended = False

    async def advertised_windows(self) -> AdvertisedWindows:
        self.asked.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.ended = True
        raise AssertionError("unreachable")


async def test_closing_waits_for_the_background_work_to_end() -> None:
    """The backends it asks are closed right after: none is asked past its close."""
    backend = Hanging("hanging")
    started = discovering(backend)
    generations = Generations(started.router, Loop(MemoryStore()))
    reloader = Reloader(started, lambda: started, lambda _: None, generations)
    reloader.start()
    await asyncio.wait_for(backend.asked.wait(), 5)
    await reloader.aclose()
    assert backend.ended


def test_anthropic_backends_of_one_server_share_the_listing_the_discovery_reads(
    tmp_path: Path,
) -> None:
    """The discovery asks one backend per server; the others on it learn what its listing
    tells of each model's thinking (``AnthropicBackend.follow``)."""
    anthropic = 'api = "anthropic"\n'
    second = BACKEND.format(name="b").replace('"m"', '"n"')
    text = BACKEND.format(name="a") + anthropic + second + anthropic
    compiled = compile_generation(write(tmp_path / "s.toml", text))
    assert compiled.discovery is not None
    first, other = compiled.router.backends
    assert isinstance(first, AnthropicBackend)
    assert isinstance(other, AnthropicBackend)
    assert other._thinking is first._thinking
