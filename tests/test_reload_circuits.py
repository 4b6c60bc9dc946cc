"""A reload keeps the circuits of the backends it leaves as they were, so a request after
it does not go back to a server known to be down; a backend configured anew starts with
closed circuits, as the change may have mended it."""

from __future__ import annotations

from pathlib import Path

from stateway.app import compile_generation
from stateway.config import Overrides
from stateway.core.generations import Generations
from stateway.core.loop import Loop
from stateway.core.routing import BackendEntry, Router
from tests.core.fakes import MemoryStore, ScriptedBackend

TWO_BACKENDS = """
[[backends]]
name = "a"
url = "{url_a}"
models = ["m"]

[[backends]]
name = "b"
url = "http://127.0.0.1:9/v1"
models = ["n"]
"""
DOWN = "http://127.0.0.1:8/v1"


def configure(path: Path, url_a: str = DOWN, extra: str = "") -> None:
    path.write_text(TWO_BACKENDS.format(url_a=url_a) + extra)


def fail(router: Router, key: str) -> None:
    for _ in range(router.state.health.policy.failure_threshold):
        router.state.health.failed(key)


async def test_an_unchanged_backend_keeps_its_open_circuit_across_a_reload(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    configure(path)
    flags = Overrides(config=str(path))
    started = compile_generation(flags)
    generations = Generations(started.router, Loop(MemoryStore()))
    fail(started.router, "a/m")
    started.router.state.health.failed("b/n")  # below the threshold: still closed
    assert started.router.state.health.state("a/m") == "open"

    configure(path, extra='\n[aliases]\nfast = "m"\n')  # a reload that leaves a and b be
    reloaded = compile_generation(flags, started)
    generations.publish(reloaded.router, Loop(MemoryStore()))
    health = reloaded.router.state.health
    assert health.state("a/m") == "open"
    assert not health.available("a/m")
    for _ in range(health.policy.failure_threshold - 1):  # its failure before the reload counts
        health.failed("b/n")
    assert health.state("b/n") == "open"

    await generations.aclose()


async def test_a_backend_configured_anew_starts_with_closed_circuits(tmp_path: Path) -> None:
    path = tmp_path / "stateway.toml"
    configure(path)
    flags = Overrides(config=str(path))
    started = compile_generation(flags)
    generations = Generations(started.router, Loop(MemoryStore()))
    fail(started.router, "a/m")
    fail(started.router, "b/n")

    configure(path, url_a="http://127.0.0.1:7/v1")  # a's URL mended; b as it was
    reloaded = compile_generation(flags, started)
    generations.publish(reloaded.router, Loop(MemoryStore()))
    assert reloaded.router.state.health.state("a/m") == "closed"
    assert reloaded.router.state.health.state("b/n") == "open"

    await generations.aclose()


async def test_the_superseded_generations_probe_does_not_hold_the_new_ones_circuit() -> None:
    """A probe under way reports to the board it started on: the new board must let
    one of its own through once the circuit is half-open."""
    clock = [0.0]
    old = router({"a": 1}, clock)
    generations = Generations(old, Loop(MemoryStore()))
    fail(old, "a/m")
    clock[0] += 60.0
    old.state.health.opening("a/m")  # the old generation's probe starts
    assert not old.state.health.available("a/m")
    new = router({"a": 1}, clock)
    generations.publish(new, Loop(MemoryStore()))
    assert new.state.health.state("a/m") == "half_open"
    assert new.state.health.available("a/m")

    await generations.aclose()


async def test_a_circuit_whose_key_another_backends_name_begins_goes_with_either_change() -> None:
    """Candidate keys are ``<backend>/<model>``, and backend names may hold a slash:
    ``a`` serving ``b/m`` and ``a/b`` serving ``m`` share a key; the circuit is kept only
    when neither backend changed."""
    clock = [0.0]
    old = router({"a": 1, "a/b": 1}, clock)
    generations = Generations(old, Loop(MemoryStore()))
    fail(old, "a/b/m")
    fail(old, "a/x")
    new = router({"a": 1, "a/b": 2}, clock)
    generations.publish(new, Loop(MemoryStore()))
    assert new.state.health.state("a/b/m") == "closed"
    assert new.state.health.state("a/x") == "open"

    await generations.aclose()


async def test_a_router_given_no_settings_carries_no_circuit_but_the_affinity_table() -> None:
    old = Router([BackendEntry(ScriptedBackend([]), {"m": "m"})])
    generations = Generations(old, Loop(MemoryStore()))
    fail(old, "scripted/m")
    new = Router([BackendEntry(ScriptedBackend([]), {"m": "m"})])
    generations.publish(new, Loop(MemoryStore()))
    assert new.state.health.state("scripted/m") == "closed"
    assert new.state.affinity is old.state.affinity
    await generations.aclose()


def router(upstreams: dict[str, object], clock: list[float]) -> Router:
    return Router(upstreams=upstreams, clock=lambda: clock[0])
