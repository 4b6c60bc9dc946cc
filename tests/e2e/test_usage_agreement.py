"""What operators read agrees with what clients were told, end to end: the real gateway
over the fake model server's three upstream wires, running a real MCP server's tool and
web search over several rounds. Each answer's ``usage`` equals what ``/metrics`` counted
for it (input and output tokens, upstream attempts, tool calls) and, for a stored
response, what ``/v1/usage`` adds to its model's bucket; a run cancelled part-way counts
in all three what its upstream reported before the cancel (an Anthropic upstream's
``message_start`` prompt count), and nothing where it reported nothing."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.e2e.configured import configured_gateway
from tests.support.fake_search import FakeSearch
from tests.support.mcp_server import serve_mcp

APIS = ("chat", "responses", "anthropic")
LOCAL = {"type": "mcp", "server_label": "local", "require_approval": "never"}
LOOP = (
    '[[tool:local__add:{"a":2,"b":3}]] [[tool:web_search:{"query":"stateway"}]] '
    "[[rounds:3]] [[reason:weighing the results]] [[cached:3]]"
)
"""Three rounds of an MCP call and a search each, then the answer: each of the four calls
reasoning, and reporting 3 prompt tokens read from the upstream's cache."""
SEARCHES = (
    '[[tool:web_search:{"query":"stateway"}]] [[rounds:3]] [[reason:weighing the results]] '
    "[[cached:3]]"
)
"""The same loop with a search alone: the gateway tool a Chat or Messages request offers."""
CACHED = 3 * 4
ANTHROPIC = {"anthropic-version": "2023-06-01"}
Samples = dict[str, dict[tuple[tuple[str, str], ...], float]]


@dataclass(frozen=True)
class Served:
    url: str
    started: int


@pytest.fixture(scope="module")
def served(
    fake_upstream: str, searching: FakeSearch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Served]:
    directory = tmp_path_factory.mktemp("usage-agreement")
    env = {"STATEWAY_MCP_ALLOWED_HOSTS": "127.0.0.1", **searching.gateway_env("searxng")}
    with serve_mcp() as mcp:
        tables = f'[mcp_servers.local]\nurl = "{mcp.url}"\n'
        for api in APIS:
            tables += f'[[backends]]\nname = "{api}"\nurl = "{fake_upstream}"\napi = "{api}"\n'
            tables += f'models = ["via-{api}"]\n'
        backend = {"url": fake_upstream}
        with configured_gateway(directory, backend, env=env, tables=tables) as gateway:
            yield Served(gateway.url, int(time.time()))


def scrape(url: str) -> Samples:
    samples: Samples = {}
    for family in text_string_to_metric_families(httpx2.get(url + "/metrics").text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return samples


def counted(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = tuple(sorted(labels.items()))
    return after.get(name, {}).get(key, 0) - before.get(name, {}).get(key, 0)


def tokens(before: Samples, after: Samples, model: str) -> tuple[float, float]:
    return tuple(  # type: ignore[return-value]
        counted(before, after, f"stateway_{kind}_tokens_total", model=model, tenant="default")
        for kind in ("input", "output")
    )


def ledger(served: Served, model: str) -> tuple[int, int, int]:
    """``/v1/usage``'s bucket of ``model``: responses, input and output tokens."""
    reply = httpx2.get(served.url + "/v1/usage", params={"start_time": served.started})
    assert reply.status_code == 200
    buckets = [b for b in reply.json()["data"] if b["model"] == model]
    assert len(buckets) <= 1  # one UTC day
    if not buckets:
        return 0, 0, 0
    [bucket] = buckets
    return bucket["responses"], bucket["input_tokens"], bucket["output_tokens"]


def events(reply: httpx2.Response) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in reply.iter_lines() if line.startswith("data: {")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("api", APIS)
def test_a_tool_loops_usage_is_counted_alike_everywhere(
    served: Served, api: str, stream: bool
) -> None:
    model = f"via-{api}"
    before, stored_before = scrape(served.url), ledger(served, model)
    body = {"model": model, "input": LOOP, "tools": [LOCAL, {"type": "web_search"}]}
    with httpx2.stream(
        "POST", served.url + "/v1/responses", json={**body, "stream": stream}, timeout=60
    ) as reply:
        if stream:
            response = events(reply)[-1]["response"]
        else:
            reply.read()
            response = reply.json()
    after = scrape(served.url)
    assert response["status"] == "completed"
    usage = response["usage"]
    assert usage["output_tokens_details"]["reasoning_tokens"] > 0
    assert usage["input_tokens_details"]["cached_tokens"] == CACHED
    told = (usage["input_tokens"], usage["output_tokens"])
    assert told[0] > 0
    assert tokens(before, after, model) == told
    attempts = "stateway_upstream_attempts_total"
    assert counted(before, after, attempts, backend=api, outcome="ok") == 4  # 3 rounds + answer
    calls = "stateway_tool_calls_total"
    assert counted(before, after, calls, tool="mcp", outcome="ok") == 3
    assert counted(before, after, calls, tool="web_search", outcome="ok") == 3
    responses, input_tokens, output_tokens = ledger(served, model)
    assert (responses - stored_before[0], input_tokens - stored_before[1]) == (1, told[0])
    assert output_tokens - stored_before[2] == told[1]


@pytest.mark.parametrize("api", APIS)
def test_chat_and_messages_answers_are_counted_as_told_and_not_stored(
    served: Served, api: str
) -> None:
    """Translated, as a gateway tool makes them: the metrics count each answer's usage;
    neither frontend stores its answers, so ``/v1/usage`` does not change."""
    model = f"via-{api}"
    stored_before = ledger(served, model)
    messages = [{"role": "user", "content": SEARCHES}]
    before = scrape(served.url)
    chat = httpx2.post(
        served.url + "/v1/chat/completions",
        json={"model": model, "messages": messages, "web_search_options": {}},
        timeout=60,
    ).json()
    middle = scrape(served.url)
    web_search = {"type": "web_search_20250305", "name": "web_search"}
    message = httpx2.post(
        served.url + "/v1/messages",
        headers=ANTHROPIC,
        json={"model": model, "max_tokens": 500, "messages": messages, "tools": [web_search]},
        timeout=60,
    ).json()
    after = scrape(served.url)
    told = (chat["usage"]["prompt_tokens"], chat["usage"]["completion_tokens"])
    assert chat["choices"][0]["finish_reason"] == "stop"
    assert chat["usage"]["prompt_tokens_details"]["cached_tokens"] == CACHED
    assert told[0] > 0
    assert tokens(before, middle, model) == told
    usage = message["usage"]
    assert message["stop_reason"] == "end_turn"
    assert usage["server_tool_use"]["web_search_requests"] == 3
    # Messages counts the prompt outside the cache beside the cache's reads and writes
    prompt = (
        usage["input_tokens"]
        + usage["cache_read_input_tokens"]
        + usage["cache_creation_input_tokens"]
    )
    assert usage["cache_read_input_tokens"] == CACHED
    assert usage["input_tokens"] > 0
    assert tokens(middle, after, model) == (prompt, usage["output_tokens"])
    assert ledger(served, model) == stored_before


@pytest.mark.parametrize(("api", "reported"), [("anthropic", True), ("chat", False)])
def test_a_cancelled_run_counts_what_its_upstream_reported_before_the_cancel(
    served: Served, api: str, reported: bool
) -> None:
    """An Anthropic upstream counts the prompt in its ``message_start``: the cancelled
    response, the metrics and ``/v1/usage`` all count it (its output, never reported, is
    not counted). A Chat upstream counts at the end: the response has no usage, and none
    is counted anywhere."""
    model = f"via-{api}"
    before, stored_before = scrape(served.url), ledger(served, model)
    body = {"model": model, "input": "four words of prompt [[words:200]] [[slow:20]]"}
    with httpx2.stream(
        "POST",
        served.url + "/v1/responses",
        json={**body, "background": True, "stream": True},
        timeout=60,
    ) as created:
        lines = (json.loads(line[6:]) for line in created.iter_lines() if line[:6] == "data: ")
        response_id = next(lines)["response"]["id"]
        next(e for e in lines if e["type"] == "response.output_text.delta")  # output began
    cancelled = httpx2.post(f"{served.url}/v1/responses/{response_id}/cancel", timeout=60)
    stored = cancelled.json()  # answered once the run has ended, its report made
    assert stored["status"] == "cancelled"
    after = scrape(served.url)
    usage = stored["usage"]
    attempts = "stateway_upstream_attempts_total"
    assert counted(before, after, attempts, backend=api, outcome="cancelled") == 1
    responses, input_tokens, output_tokens = ledger(served, model)
    if reported:
        assert usage["input_tokens"] > 0
        assert usage["output_tokens"] == 0
        assert tokens(before, after, model) == (usage["input_tokens"], 0)
    else:
        assert usage is None
        assert tokens(before, after, model) == (0, 0)
    told = 0 if usage is None else usage["input_tokens"]
    assert (responses - stored_before[0], input_tokens - stored_before[1]) == (1, told)
    assert output_tokens == stored_before[2]
