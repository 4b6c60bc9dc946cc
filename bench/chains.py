"""``python -m bench.chains``: what a long ``previous_response_id`` chain costs a turn.

A client that keeps its state on the server (``store: true`` and ``previous_response_id``,
as the OpenAI Agents SDK and most Responses agents do) sends only its new input; the
gateway reads the whole chain back (one recursive query, :mod:`stateway.storage.sql.queries`)
and sends every item to the model each turn. This measures a turn's latency as the chain
grows: a chain is built to each depth in ``--depths`` (each turn a short user message and
a short answer, so two items a turn), then ``--turns`` turns continue from the response at
that depth (siblings: the depth does not grow while it is measured), one at a time.

Against the fake model answering at once, so the gateway's own work is all there is to
measure; SQLite by default (``--database`` takes a PostgreSQL URL too). The fake model
counts nothing it is not asked to, so the time a model spends reading the longer prompt is
not in these numbers: they are the gateway's share only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import aiohttp
import orjson

from bench import processes

MODEL = "fake-model"
HEADERS = {"Content-Type": "application/json"}


async def turn(http: aiohttp.ClientSession, previous: str | None, text: str) -> tuple[str, float]:
    """One stored turn continuing ``previous``: its response id and its wall time."""
    fields: dict[str, object] = {"model": MODEL, "input": text, "store": True}
    if previous is not None:
        fields["previous_response_id"] = previous
    began = time.perf_counter()
    async with http.post("/v1/responses", data=orjson.dumps(fields), headers=HEADERS) as reply:
        answer = orjson.loads(await reply.read())
    spent = time.perf_counter() - began
    if reply.status != 200 or answer.get("status") != "completed":
        raise RuntimeError(f"turn failed ({reply.status}): {answer}")
    return answer["id"], spent


async def measure(base_url: str, depths: list[int], turns: int) -> dict[int, list[float]]:
    """Turn times at each depth, growing one chain from the shallowest depth to the
    deepest."""
    times: dict[int, list[float]] = {}
    async with aiohttp.ClientSession(base_url) as http:
        tip: str | None = None
        depth = 0
        for wanted in sorted(depths):
            while depth < wanted:
                tip, _ = await turn(http, tip, f"turn {depth}: say something short")
                depth += 1
            for _ in range(3):  # warm the statement caches at this depth
                await turn(http, tip, "a sibling turn")
            samples = []
            for n in range(turns):
                _, spent = await turn(http, tip, f"sibling {n}")
                samples.append(spent * 1000)
            times[wanted] = samples
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chains", description=__doc__)
    parser.add_argument("--depths", default="1,10,100,500,1000")
    parser.add_argument("--turns", type=int, default=30)
    parser.add_argument("--database", help="a database URL (default: a fresh SQLite file)")
    args = parser.parse_args(argv)
    depths = [int(value) for value in args.depths.split(",")]
    with processes.gateway_on_fake(args.database) as gw:
        times = asyncio.run(measure(gw.url, depths, args.turns))
    print(f"| chain depth (turns) | items sent | median ms ({args.turns} turns) | p90 ms |")
    print("|---:|---:|---:|---:|")
    for depth, samples in times.items():
        p90 = statistics.quantiles(samples, n=10)[-1]
        items = 2 * depth + 1
        print(f"| {depth} | {items} | {statistics.median(samples):.2f} | {p90:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
