"""The process's gateway as built from a configuration: what its metrics are told of it
and read from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stateway.app import build_app, build_gateway, compile_generation, gateway, open_gateway
from stateway.config import ConfigError, Overrides
from stateway.core.commands import CreateResponse
from stateway.core.response import ResponseState
from stateway.core.runs import Run
from stateway.core.telemetry import RunReport
from stateway.core.usage import Usage
from stateway.storage.sql import SqlResponseStore, migrate, open_store
from stateway.storage.sql.api_keys import SqlKeyStore
from stateway.telemetry.metrics import MAX_MODELS, OTHER_MODEL
from tests.core.fakes import MemoryStore
from tests.surfaces.http.asgi import call

HOST = [(b"host", b"127.0.0.1")]

CONFIG = """
[[backends]]
name = "local"
url = "http://127.0.0.1:9/v1"
models = ["qwen3"]

[[backends]]
name = "anything"
url = "http://127.0.0.1:9/v1"

[aliases]
fast = "qwen3"
"""


def first_token_models(metrics_text: bytes) -> set[str]:
    """The ``model`` labels of the time-to-first-token histogram's series."""
    prefix = 'stateway_time_to_first_token_seconds_count{model="'
    lines = metrics_text.decode().splitlines()
    return {line[len(prefix) :].partition('"')[0] for line in lines if line.startswith(prefix)}


async def test_configured_names_keep_their_model_label_past_the_bound(tmp_path: Path) -> None:
    """A client sending made-up names to the catch-all backend uses the bound up; the
    names the configuration routes (a backend's models, an alias, and those a reload
    adds) still count under their own."""
    config = tmp_path / "stateway.toml"
    config.write_text(CONFIG)
    flags = Overrides(config=str(config))
    parts = build_gateway(compile_generation(flags), flags, MemoryStore())
    metrics = parts.telemetry.metrics
    for n in range(MAX_MODELS + 10):
        metrics.run_ended(RunReport("default", f"made-up-{n}", Usage(1, 1), [], 0.1))
    config.write_text(CONFIG.replace('models = ["qwen3"]', 'models = ["qwen3", "added"]'))
    parts.reloader.reload_now()
    for name in ("qwen3", "fast", "added", "made-up-again"):
        metrics.run_ended(RunReport("default", name, Usage(1, 1), [], 0.1))
    models = first_token_models(metrics.exposition()[0])
    assert {"qwen3", "fast", "added", OTHER_MODEL} <= models
    assert "made-up-again" not in models
    assert len(models) == MAX_MODELS + 4


async def test_runs_in_flight_are_read_from_the_gateways_registry() -> None:
    flags = Overrides(upstream="http://127.0.0.1:9/v1")
    parts = build_gateway(compile_generation(flags), flags, MemoryStore())

    def active_runs() -> str:
        lines = parts.telemetry.metrics.exposition()[0].decode().splitlines()
        return next(line for line in lines if line.startswith("stateway_active_runs "))

    assert active_runs() == "stateway_active_runs 0.0"
    state = ResponseState.start("resp_1", "default", 1.0, CreateResponse("m", [], stream=True))
    run = Run(state, [])
    parts.runs.add(run)
    assert active_runs() == "stateway_active_runs 1.0"
    parts.runs.discard(run)
    assert active_runs() == "stateway_active_runs 0.0"


async def test_a_start_refused_after_the_database_opened_closes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing that cannot export is refused as the gateway is built, after its database
    was opened (and its server key read through it): the database is closed before the
    refusal is raised, no connection left open."""
    monkeypatch.setenv("STATEWAY_TRACING", "true")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "carrier-pigeon")
    database = f"sqlite:///{tmp_path}/x.db"
    await migrate(database)
    opened: list[SqlResponseStore] = []

    def open_recorded(url: str, **bounds: Any) -> SqlResponseStore:
        opened.append(open_store(url, **bounds))
        return opened[-1]

    monkeypatch.setattr(gateway, "open_store", open_recorded)
    flags = Overrides(database=database, upstream="http://127.0.0.1:9/v1")
    with pytest.raises(ConfigError, match="carrier-pigeon"):
        await open_gateway(compile_generation(flags), flags)
    [store] = opened
    assert store.engine.pool.checkedin() == 0


async def test_a_gateway_opened_over_a_database_keeps_all_of_its_state_there(
    tmp_path: Path,
) -> None:
    """Usage, conversations, API keys, leases and the sweeps of deleted rows: all over the
    gateway's database (given none, ``/v1/usage`` would be a 404, a conversation could
    not be made, ``[auth] api_keys`` refused, runs judged by no lease)."""
    database = f"sqlite:///{tmp_path}/x.db"
    await migrate(database)
    flags = Overrides(database=database, upstream="http://127.0.0.1:9/v1")
    parts = await open_gateway(compile_generation(flags), flags)
    app = build_app(parts)
    async with app.router.lifespan_context(app):
        usage = await call(app, "GET", "/v1/usage", content_type=None, headers=HOST)
        made = await call(app, "POST", "/v1/conversations", b"{}", headers=HOST)
        found = await call(app, "GET", f"/v1/conversations/{made.json()['id']}", headers=HOST)
    assert (usage.status, made.status, found.status) == (200, 200, 200)
    assert isinstance(parts.keys, SqlKeyStore)
    assert parts.leases is not None
    assert parts.retention is not None
