"""``python -m bench.routing``: what route planning and feature stages add per request.

Measured in process, without HTTP, so that a difference of a few microseconds is not
lost in the noise of a socket round trip: the core's ``Gateway.execute`` of a store:false,
non-stream ``CreateResponse``, and its run to the end, over model servers that answer at
once (an in-memory backend yielding one text delta and the finish). One router holds two
routes, and the same request (two function tools, ``max_output_tokens: 1024``) goes to
each in turn:

- **single**: one candidate, no stages;
- **routed**: three candidates weighted 1:1:2, and two stages loaded from their entry
  points as a configuration names them: ``tool_filter`` (denies one of the two tools)
  and ``param_clamp`` (lowers ``max_output_tokens`` to 256).

Everything else (decoding, HTTP, storage, the upstream) is the same for both or absent,
so the difference is the per-request cost of resolving the route, checking the
candidates' capabilities, ordering them by weight, recording the attempt, and running the
stages and re-validating the command after each. Requests alternate between the routes
(their order swapped every iteration) so that drift hits both alike; the difference of
the medians is the result (the issue's target: at most 0.05 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import statistics
import time
from collections.abc import AsyncGenerator, Mapping

from tests.core.fakes import MemoryStore

from stateway.core.commands import CreateResponse
from stateway.core.gateway import Gateway
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import Delta, Finish, InferenceRequest, TextDelta
from stateway.core.items import Item
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import Candidate, Route, Router
from stateway.core.run_registry import RunRegistry
from stateway.core.stages.chain import StageChain
from stateway.route_config import StageConfig
from stateway.stage_loader import load_stage

TARGET_MS = 0.05
USER: Item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
TOOLS: list[Item] = [
    {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
    for name in ("lookup", "rm_rf")
]


class InstantBackend:
    """A model server that answers at once: one text delta, then the finish."""

    carried_item_types = frozenset({"message", "function_call", "function_call_output"})
    carried_part_types: Mapping[str, frozenset[str]] = {
        "user": frozenset({"input_text"}),
        "system": frozenset({"input_text"}),
        "developer": frozenset({"input_text"}),
        "assistant": frozenset({"output_text"}),
        "tool_output": frozenset({"input_text"}),
    }
    carries_unknown_types = False

    def __init__(self, name: str) -> None:
        self.name = name

    async def infer(self, request: InferenceRequest) -> AsyncGenerator[Delta, None]:
        yield TextDelta("Hello!")
        yield Finish("stop")

    async def list_models(self) -> list[str]:
        return []

    async def aclose(self) -> None:
        pass


def build_gateway() -> Gateway:
    single = Route("single", (Candidate(InstantBackend("solo"), "solo-model"),))
    stages = StageChain(
        [
            load_stage(StageConfig(name="tool_filter", options={"deny": ["rm_rf"]}), "bench"),
            load_stage(
                StageConfig(name="param_clamp", options={"max_output_tokens": 256}), "bench"
            ),
        ]
    )
    candidates = tuple(
        Candidate(InstantBackend(name), f"{name}-model", weight)
        for name, weight in (("a", 1.0), ("b", 1.0), ("c", 2.0))
    )
    routed = Route("routed", candidates, stages=stages)
    store = MemoryStore()
    return Gateway(store, Router(routes=[single, routed]), Loop(store), RunRegistry())


def command(route: str) -> CreateResponse:
    settings = GenerationSettings(max_output_tokens=1024, tools=[dict(t) for t in TOOLS])
    return CreateResponse(route, [USER], store=False, settings=settings)


async def one(gateway: Gateway, route: str) -> float:
    """Seconds from the command to the end of its run."""
    principal = Principal()
    began = time.perf_counter()
    run = await gateway.execute(principal, command(route))
    await run.wait()
    spent = time.perf_counter() - began
    if run.state.status != "completed":
        raise RuntimeError(f"route {route}: the run ended {run.state.status}")
    return spent


async def measure(requests: int, warmup: int) -> dict[str, list[float]]:
    gateway = build_gateway()
    routes = ["single", "routed"]
    for _ in range(warmup):
        for route in routes:
            await one(gateway, route)
    checked = await gateway.execute(Principal(), command("routed"))
    await checked.wait()
    if checked.state.settings.max_output_tokens != 256 or len(checked.state.settings.tools) != 1:
        raise RuntimeError("the routed route's stages did not run")
    times: dict[str, list[float]] = {route: [] for route in routes}
    gc.collect()
    for index in range(requests):
        for route in routes if index % 2 else reversed(routes):
            times[route].append(await one(gateway, route))
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.routing", description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000, help="per route (20000)")
    parser.add_argument("--warmup", type=int, default=1_000, help="per route (1000)")
    args = parser.parse_args(argv)
    times = asyncio.run(measure(args.requests, args.warmup))
    medians = {route: statistics.median(spent) * 1000 for route, spent in times.items()}
    means = {route: statistics.fmean(spent) * 1000 for route, spent in times.items()}
    print(f"| route ({args.requests} requests each, in process) | median ms | mean ms | p90 ms |")
    print("|---|---|---|---|")
    shapes = {"single": "1 candidate, no stages", "routed": "3 candidates, 2 stages"}
    for route, spent in times.items():
        p90 = statistics.quantiles(spent, n=10)[-1] * 1000
        print(
            f"| {route}: {shapes[route]} | {medians[route]:.4f} | {means[route]:.4f} | {p90:.4f} |"
        )
    added = medians["routed"] - medians["single"]
    verdict = "met" if added <= TARGET_MS else "missed"
    print(
        f"routing + stages add {added:.4f} ms per request (median; mean "
        f"{means['routed'] - means['single']:.4f} ms); target <= {TARGET_MS} ms: {verdict}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
