"""``python -m bench.mcp_loop``: the gateway's own cost per round of a three-round MCP loop.

One response whose model calls an MCP tool three times, round after round, then answers:
through the gateway (``POST /v1/responses`` with an ``mcp`` tool: it lists the server's
tools, calls the model four times and the tool three times), against the same work done
directly by a client (one ``tools/list``, four Chat Completions calls with the growing
conversation, three ``tools/call`` on a kept-open MCP session). The model is the fake, the
MCP server the test suite's (a process of its own), everything on loopback, one request
at a time. The gateway's cost per round is ``(gateway - direct) / 3`` of the medians: it
includes the client's own hop to the gateway and the response's encoding, spread over
the rounds (the issue's target: at most 5 ms).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from tests.support.mcp_server import ANNOUNCEMENT as MCP_ANNOUNCEMENT

from bench import processes

MODEL = "fake-model"
ROUNDS = 3
CALL = '[[tool:bench__add:{"a":1,"b":2}]]'
PROMPT = f"{CALL} [[rounds:{ROUNDS}]]"


async def through_gateway(base_url: str, store: bool) -> float:
    body = orjson.dumps(
        {
            "model": MODEL,
            "input": PROMPT,
            "store": store,
            "tools": [{"type": "mcp", "server_label": "bench", "require_approval": "never"}],
        }
    )
    headers = {"Content-Type": "application/json"}
    async with aiohttp.ClientSession(base_url) as http:
        began = time.perf_counter()
        async with http.post("/v1/responses", data=body, headers=headers) as answer:
            reply = orjson.loads(await answer.read())
        spent = time.perf_counter() - began
    calls = [i for i in reply["output"] if i["type"] == "mcp_call"]
    if reply["status"] != "completed" or len(calls) != ROUNDS:
        raise RuntimeError(f"unexpected gateway reply: {reply['status']}, {len(calls)} calls")
    return spent


async def direct(model_url: str, mcp: ClientSession, http: aiohttp.ClientSession) -> float:
    """The same work without the gateway: list, then model, tool, model, ... model."""
    began = time.perf_counter()
    listed = await mcp.list_tools()
    tools = [
        {"type": "function", "function": {"name": f"bench__{t.name}", "parameters": t.input_schema}}
        for t in listed.tools
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": PROMPT}]
    for _ in range(ROUNDS + 1):
        body = orjson.dumps({"model": MODEL, "messages": messages, "tools": tools})
        async with http.post(model_url + "/chat/completions", data=body) as answer:
            message = orjson.loads(await answer.read())["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        if not calls:
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            arguments = orjson.loads(call["function"]["arguments"])
            result = await mcp.call_tool("add", arguments)
            text = "".join(getattr(part, "text", "") for part in result.content)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})
    else:
        raise RuntimeError("the model never answered")
    return time.perf_counter() - began


async def measure_direct(model_url: str, mcp_url: str, count: int, warmup: int) -> list[float]:
    headers = {"Content-Type": "application/json"}
    async with (
        aiohttp.ClientSession(headers=headers) as http,
        streamable_http_client(mcp_url) as (read, write, *_),
        ClientSession(read, write) as mcp,
    ):
        await mcp.initialize()
        for _ in range(warmup):
            await direct(model_url, mcp, http)
        return [await direct(model_url, mcp, http) for _ in range(count)]


async def measure_gateway(base_url: str, count: int, warmup: int, store: bool) -> list[float]:
    for _ in range(warmup):
        await through_gateway(base_url, store)
    return [await through_gateway(base_url, store) for _ in range(count)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.mcp_loop", description=__doc__)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="stateway-bench-") as tmp:
        work = Path(tmp)
        mcp_command = [sys.executable, "-m", "tests.support.mcp_server", "--page-size", "100"]
        with (
            processes.fake_upstream(work) as fake,
            processes.start_server("mcp", mcp_command, MCP_ANNOUNCEMENT, work) as mcp,
        ):
            config = work / "stateway.toml"
            config.write_text(f'[mcp_servers.bench]\nurl = "{mcp.url}/mcp"\n')
            with processes.gateway(
                "gateway-mcp", fake.url, work / "mcp.db", work, config=config
            ) as gateway:
                runs = {
                    "direct": asyncio.run(
                        measure_direct(fake.url, mcp.url + "/mcp", args.requests, args.warmup)
                    ),
                    "gateway store:false": asyncio.run(
                        measure_gateway(gateway.url, args.requests, args.warmup, store=False)
                    ),
                    "gateway store:true": asyncio.run(
                        measure_gateway(gateway.url, args.requests, args.warmup, store=True)
                    ),
                }
    medians = {name: statistics.median(times) * 1000 for name, times in runs.items()}
    print(f"| path | median ms ({args.requests} responses, {ROUNDS} rounds each) | p90 ms |")
    print("|---|---|---|")
    for name, times in runs.items():
        p90 = statistics.quantiles(times, n=10)[-1] * 1000
        print(f"| {name} | {medians[name]:.2f} | {p90:.2f} |")
    for name in ("gateway store:false", "gateway store:true"):
        per_round = (medians[name] - medians["direct"]) / ROUNDS
        print(f"{name}: the gateway's own cost per round = {per_round:.2f} ms (median)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
