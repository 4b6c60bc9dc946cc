"""One benchmark run: start the servers, measure, evaluate, profile the misses, report.

Processes: one fake model server for everything; the floor and two gateways (store:false
and store:true, each on a fresh SQLite file in a temporary directory) for the latency and
throughput runs; then a fresh store:true gateway for each memory run (plain, and with half
the clients leaving mid-stream) and one for the overload run. All listen on 127.0.0.1
only, every loop is bounded by a count or a duration, and every process is stopped when
its block exits.
"""

from __future__ import annotations

import datetime
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import processes
from bench.latency import measure_latency
from bench.load import LoadStats, run_wrk, wrk_path
from bench.machine import describe_machine
from bench.memory import MemoryStats, measure_memory, measure_memory_with_disconnects
from bench.overload import OverloadStats, measure_overload, raise_fd_limit
from bench.procfs import CpuWindow
from bench.profiling import ProfileRun, profile_under_load, py_spy_path
from bench.report import plain
from bench.scenarios import (
    DIRECT,
    FLOOR,
    GATEWAY_CHAT,
    GATEWAY_MESSAGES,
    GATEWAY_STORE_FALSE,
    GATEWAY_STORE_TRUE,
    GATEWAYS,
    MODES,
    TARGETS,
    Scenario,
    scenario,
)
from bench.targets import added_latency, evaluate, throughput_ratios


@dataclass(frozen=True, slots=True)
class Settings:
    """How much to measure."""

    quick: bool
    requests: int
    warmup: int
    duration: float
    wrk_warmup: float
    connections: int
    rss_requests: int
    rss_warmup: int
    overload_streams: int
    overload_seconds: float
    """The bound on the overload run: streams not ended by then count as *other*."""
    profile: str
    """``auto`` (only scenarios that missed a target), ``always`` or ``never``."""
    profile_seconds: float
    results_dir: Path


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run(settings: Settings) -> dict[str, Any]:
    wrk_path()  # fail early, with the install hint, when wrk is missing
    if settings.profile != "never" and py_spy_path() is None:
        log("py-spy is not installed: profiles will be skipped (pip install -e '.[bench]')")
    began = time.monotonic()
    results: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "settings": plain(settings),
        "machine": describe_machine(),
    }
    settings.results_dir.mkdir(parents=True, exist_ok=True)
    fd_limit = raise_fd_limit(settings.overload_streams + 4096)  # before any server starts
    if fd_limit < settings.overload_streams + 1024:
        log(f"open-file limit {fd_limit}: too low for {settings.overload_streams:,} streams")
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp, ExitStack() as stack:
        work = Path(tmp)
        log("starting the fake model server")
        fake = stack.enter_context(processes.fake_upstream(work))
        with ExitStack() as servers:
            log("starting the floor and two gateways (store:false, store:true)")
            floor = servers.enter_context(processes.passthrough(fake.url, work))
            gw_false = servers.enter_context(
                processes.gateway("gateway-store-false", fake.url, work / "false.db", work)
            )
            gw_true = servers.enter_context(
                processes.gateway("gateway-store-true", fake.url, work / "true.db", work)
            )
            hops = {DIRECT: None, FLOOR: floor, GATEWAY_STORE_FALSE: gw_false}
            hops[GATEWAY_STORE_TRUE] = gw_true
            hops[GATEWAY_CHAT] = gw_false  # the Chat Completions fast path
            hops[GATEWAY_MESSAGES] = gw_false  # the Messages frontend
            urls = {DIRECT: fake.url, FLOOR: floor.url}
            urls |= {GATEWAY_STORE_FALSE: gw_false.url, GATEWAY_STORE_TRUE: gw_true.url}
            urls[GATEWAY_CHAT] = gw_false.url
            urls[GATEWAY_MESSAGES] = gw_false.url
            scenarios = [scenario(t, stream, urls[t]) for stream in MODES for t in TARGETS]

            log(f"c=1 latency: {len(scenarios)} scenarios x {settings.requests} requests")
            window = CpuWindow({"fake": fake.pid} | {s.name: s.pid for s in hops.values() if s})
            window.start(time.monotonic())
            latency = measure_latency(scenarios, requests=settings.requests, warmup=settings.warmup)
            results["latency_cpu"] = window.stop(time.monotonic())
            results["latency"] = plain(latency)
            results["added"] = plain(added_latency(latency))

            throughput: dict[str, LoadStats] = {}
            for s in scenarios:
                log(f"c={settings.connections} throughput: {s.key}")
                hop = hops[s.target]
                pids = {"fake": fake.pid} | ({"hop": hop.pid} if hop else {})
                throughput[s.key] = run_wrk(
                    s,
                    connections=settings.connections,
                    duration=settings.duration,
                    warmup=settings.wrk_warmup,
                    cpu=CpuWindow(pids),
                )
                if throughput[s.key].error_count:
                    log(f"  wrk reported errors: {throughput[s.key].errors}")
            ratios = throughput_ratios(throughput)
            results["throughput"] = plain(throughput)
            results["ratios"] = plain(ratios)

            verdicts = evaluate(added_latency(latency), ratios, None)
            results["profiles"] = plain(
                _profiles(settings, verdicts_missed(verdicts), scenarios, hops)
            )

        memory = _memory(settings, fake.url, work)
        results["memory"] = plain(memory)
        disconnects = _memory(settings, fake.url, work, disconnects=True)
        results["memory_disconnects"] = plain(disconnects)
        overload = _overload(settings, fake.url, work)
        results["overload"] = plain(overload)
        verdicts = evaluate(
            added_latency(latency), ratios, memory, disconnects=disconnects, overload=overload
        )
        results["targets"] = plain(verdicts)
    results["seconds"] = round(time.monotonic() - began, 1)
    return results


def verdicts_missed(verdicts: list[Any]) -> set[str]:
    return {v.scenario for v in verdicts if not v.passed and v.scenario}


def _profiles(
    settings: Settings,
    missed: set[str],
    scenarios: list[Scenario],
    hops: dict[str, processes.Server | None],
) -> list[ProfileRun]:
    if settings.profile == "never":
        return []
    chosen = [
        s
        for s in scenarios
        if s.target in GATEWAYS and (settings.profile == "always" or s.key in missed)
    ]
    runs = []
    for s in chosen:
        server = hops[s.target]
        assert server is not None
        log(f"py-spy under c={settings.connections} load: {s.key}")
        runs.append(
            profile_under_load(
                s,
                server.pid,
                seconds=settings.profile_seconds,
                out_dir=settings.results_dir,
                connections=settings.connections,
            )
        )
    return runs


def _memory(
    settings: Settings, upstream_url: str, work: Path, *, disconnects: bool = False
) -> MemoryStats:
    how = ", half the clients leaving mid-stream" if disconnects else ""
    log(f"memory: fresh store:true gateway, {settings.rss_requests:,} requests{how}")
    name = "gateway-memory-disconnects" if disconnects else "gateway-memory"
    with processes.gateway(name, upstream_url, work / f"{name}.db", work) as gw:
        mixed = [scenario(GATEWAY_STORE_TRUE, stream, gw.url) for stream in MODES]
        measure = measure_memory_with_disconnects if disconnects else measure_memory
        return measure(gw.pid, mixed, requests=settings.rss_requests, warmup=settings.rss_warmup)


def _overload(settings: Settings, upstream_url: str, work: Path) -> OverloadStats:
    streams = settings.overload_streams
    log(f"overload: fresh store:true gateway, {streams:,} concurrent streams")
    with processes.gateway("gateway-overload", upstream_url, work / "overload.db", work) as gw:
        stats = measure_overload(gw.pid, gw.url, streams=streams, bound=settings.overload_seconds)
    log(
        f"  {stats.completed:,} completed, {stats.refused:,} refused, {stats.failed_midway:,}"
        f" failed mid-way, {stats.other:,} other; peak RSS {stats.peak_rss_mib:.0f} MiB"
    )
    return stats
