"""Failover between a route's candidates: before the round's first delta only."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from stateway.core import events as ev
from stateway.core.commands import CreateResponse
from stateway.core.errors import (
    GatewayError,
    Overloaded,
    UpstreamContextTooLong,
    UpstreamError,
    UpstreamRejected,
    UpstreamResponseTooLarge,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from stateway.core.generation_settings import GenerationSettings
from stateway.core.inference import (
    Finish,
    MessageStart,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    UsageReport,
)
from stateway.core.principal import Principal
from stateway.core.routing import recoverable
from stateway.core.usage import Usage
from stateway.protocols.responses.encode import encode_response
from tests.core.fakes import MemoryStore
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
OK = [TextDelta("fine"), Finish("stop")]


async def run_over(
    *backends: Named,
    max_attempts: int = 3,
    stream: bool = True,
    settings: GenerationSettings | None = None,
) -> Any:
    tiers = [candidate(b, priority=i) for i, b in enumerate(backends)]
    store = MemoryStore()
    assistant = route(*tiers, max_attempts=max_attempts)
    command = CreateResponse(
        "assistant", [USER], stream=stream, settings=settings or GenerationSettings()
    )
    run = await gateway(router(assistant), store).execute(Principal(), command)
    await run.wait()
    return run, store


@pytest.mark.parametrize(
    "failure",
    [
        UpstreamError("500"),
        UpstreamUnavailable("refused"),
        UpstreamTimeout("no first byte"),
        UpstreamRejected("slow down", status=429, code="rate_limit_exceeded"),
        UpstreamRejected("no such model", status=404, code="model_not_found"),
        UpstreamRejected("body over 1 MB", status=413, code="request_too_large"),
        UpstreamRejected("too long", code="context_length_exceeded"),
        UpstreamContextTooLong("too long", tokens=900, window=512, requested=None),
        UpstreamRejected("not a multimodal model", code="image_input_unsupported"),
        Overloaded("queue full"),
    ],
)
async def test_a_recoverable_failure_before_output_moves_to_the_next_candidate(
    failure: GatewayError,
) -> None:
    a, b = Named("a", [failure]), Named("b", OK)
    run, store = await run_over(a, b)
    assert run.state.status == "completed"
    assert run.state.output[0]["content"][0]["text"] == "fine"
    assert [r.model for r in b.requests] == ["b-model"]
    kinds = [type(e).__name__ for e in run.events]
    assert kinds.count("ResponseCreated") == 1
    assert kinds[-1] == "ResponseFinished"
    outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in run.state.attempts]
    assert outcomes == [("a", "failed", failure.code), ("b", "ok", None)]
    assert all(x["latency_ms"] is not None for x in run.state.attempts)
    assert run.state.attempts[1]["first_byte_ms"] is not None
    stored = store.records[("default", run.id)].body
    assert stored["attempts"] == run.state.attempts
    assert "attempts" not in encode_response(run.state)


@pytest.mark.parametrize(
    "failure",
    [
        UpstreamRejected("bad request", status=400),
        UpstreamResponseTooLarge("too big"),
    ],
)
async def test_a_failure_another_server_would_repeat_is_not_retried(
    failure: GatewayError,
) -> None:
    a, b = Named("a", [failure]), Named("b", OK)
    run, _ = await run_over(a, b)
    assert run.state.status == "failed"
    assert b.requests == []
    assert [x["outcome"] for x in run.state.attempts] == ["failed"]


async def test_a_failure_after_the_first_delta_is_terminal_for_every_candidate() -> None:
    a = Named("a", [TextDelta("half"), UpstreamError("cut", code="upstream_stream_cut")])
    b = Named("b", OK)
    run, store = await run_over(a, b)
    assert run.state.status == "failed"
    assert run.state.error["code"] == "upstream_stream_cut"
    assert b.requests == []
    assert len(a.requests) == 1
    [attempt] = run.state.attempts
    assert (attempt["outcome"], attempt["detail"]) == ("cut", "upstream_stream_cut")
    assert attempt["first_byte_ms"] is not None
    assert isinstance(run.events[-1], ev.ResponseFinished)
    assert store.records[("default", run.id)].status == "failed"


async def test_a_prompt_count_before_output_is_no_output() -> None:
    """An Anthropic upstream reports the prompt's usage (``message_start``) before any
    output: a failure after it still moves on, and the response's prompt usage is the
    answering candidate's, its first report; the final report is the usage."""
    prompt_a, prompt_b = Usage(9, 1, cached_tokens=4), Usage(5, 1, cache_write_tokens=2)
    a = Named("a", [UsageReport(prompt_a), UpstreamError("overloaded")])
    b = Named("b", [UsageReport(prompt_b), TextDelta("fine"), UsageReport(Usage(5, 3))])
    b.script.append(Finish("stop"))
    run, _ = await run_over(a, b)
    assert run.state.status == "completed"
    assert [x["outcome"] for x in run.state.attempts] == ["failed", "ok"]
    assert run.state.prompt_usage == prompt_b
    assert run.state.usage == Usage(5, 3)
    kinds = [type(e).__name__ for e in run.events]
    assert kinds.count("ResponseCreated") == 1


@pytest.mark.parametrize(
    "opening",
    [
        pytest.param([TextDelta("")], id="anthropic-text-block-opened"),
        pytest.param([ReasoningDelta("")], id="empty-reasoning"),
        pytest.param([MessageStart("final_answer")], id="responses-message-item-added"),
        pytest.param([MessageStart(), TextDelta("")], id="anthropic-second-text-block"),
    ],
)
async def test_a_message_opened_without_content_is_no_output(opening: list[Any]) -> None:
    """An upstream that opens its answer (a Responses ``output_item.added`` message, an
    Anthropic text block's ``content_block_start``) and fails before its first token has
    shown nothing: the round moves on, and only the answering candidate's message is
    output (with its own phase, not the failed one's)."""
    a = Named("a", [*opening, UpstreamError("overloaded", code="upstream_error")])
    b = Named("b", OK)
    run, _ = await run_over(a, b)
    assert run.state.status == "completed"
    outcomes = [(x["backend"], x["outcome"]) for x in run.state.attempts]
    assert outcomes == [("a", "failed"), ("b", "ok")]
    [message] = run.state.output
    assert message["content"][0]["text"] == "fine"
    assert "phase" not in message
    added = [e for e in run.events if isinstance(e, ev.ItemAdded)]
    assert len(added) == 1


async def test_a_message_start_before_the_first_token_keeps_its_phase() -> None:
    """The opening held back while failover is open is applied with the first token."""
    b = Named("b", [MessageStart("commentary"), TextDelta("fine"), Finish("stop")])
    run, _ = await run_over(b)
    [message] = run.state.output
    assert (message["phase"], message["content"][0]["text"]) == ("commentary", "fine")


async def test_a_message_begun_again_before_the_first_token_is_one_message() -> None:
    """An upstream that opens a message, leaves it, and opens another before any output
    (a Responses message item added and done empty, then the next one added) answers
    with the one that got content: the opening held back is the last one."""
    b = Named(
        "b",
        [MessageStart("commentary"), MessageStart("final_answer"), TextDelta("fine"), OK[1]],
    )
    run, _ = await run_over(b)
    [message] = run.state.output
    assert (message["phase"], message["content"][0]["text"]) == ("final_answer", "fine")


async def test_a_usage_report_after_a_held_opening_is_not_the_prompts() -> None:
    """A usage report that comes after a held opening (a Responses upstream's
    ``response.completed`` after a call named with empty arguments) is the answer's
    final count, not a prompt count made before any output: ``message_start`` on a
    Messages stream must not show it."""
    a = Named("a", [ToolCallDelta(0, "call_1", "now", ""), UsageReport(Usage(7, 5))])
    a.script.append(Finish("tool_calls"))
    run, _ = await run_over(a)
    assert run.state.usage == Usage(7, 5)
    assert run.state.prompt_usage is None


@pytest.mark.parametrize(
    "after",
    [
        pytest.param(ReasoningDelta("think"), id="reasoning"),
        pytest.param(ToolCallDelta(0, "call_1", "lookup", '{"q"'), id="tool-call"),
    ],
)
async def test_an_opened_message_is_shown_before_the_output_that_follows_it(after: Any) -> None:
    """A message opened, then other output before its first token: the message is shown
    (empty, with its phase) where the upstream opened it, before that output, and a
    failure after it is final: output reached the client."""
    a = Named("a", [MessageStart("commentary"), after, UpstreamError("cut")])
    b = Named("b", OK)
    run, _ = await run_over(a, b)
    assert run.state.status == "failed"
    assert b.requests == []
    assert [x["outcome"] for x in run.state.attempts] == ["cut"]
    message = run.state.output[0]
    assert (message["type"], message["phase"]) == ("message", "commentary")
    assert message["content"][0]["text"] == ""
    added = [e.output_index for e in run.events if isinstance(e, ev.ItemAdded)]
    done = [e.output_index for e in run.events if isinstance(e, ev.ItemDone)]
    assert added == [0, 1]
    assert done == [0]  # the item the failure cut off is not announced done


@pytest.mark.parametrize(
    "opening",
    [
        pytest.param([ToolCallDelta(0, "call_1", "lookup", "")], id="vllm-first-fragment"),
        pytest.param(
            [ToolCallDelta(0, "call_1", "lookup", ""), ToolCallDelta(0, None, None, "")],
            id="named-then-empty-fragment",
        ),
        pytest.param(
            [MessageStart(), ToolCallDelta(0, "call_1", "lookup", "")], id="message-then-call"
        ),
    ],
)
async def test_a_call_named_before_its_first_argument_is_no_output(opening: list[Any]) -> None:
    """A call whose first fragment names it without arguments (vLLM, an Anthropic
    ``tool_use`` block's start) shows nothing yet: a failure right after it moves on to
    the next candidate, whose answer is the only output."""
    a = Named("a", [*opening, UpstreamError("overloaded", code="upstream_error")])
    b = Named("b", OK)
    run, _ = await run_over(a, b)
    assert run.state.status == "completed"
    assert [(x["backend"], x["outcome"]) for x in run.state.attempts] == [
        ("a", "failed"),
        ("b", "ok"),
    ]
    [message] = run.state.output
    assert message["content"][0]["text"] == "fine"
    assert len([e for e in run.events if isinstance(e, ev.ItemAdded)]) == 1


async def test_a_held_call_counts_as_the_rounds_one_call() -> None:
    """With ``parallel_tool_calls: false`` a call named before its first argument is the
    round's one call: a second call after it is dropped, not the held one."""
    for later in ([ToolCallDelta(0, None, None, "{}")], []):
        deltas: list[Any] = [
            ToolCallDelta(0, "call_1", "now", ""),
            *later,
            ToolCallDelta(1, "call_2", "later", "{}"),
            Finish("tool_calls"),
        ]
        run, _ = await run_over(
            Named("a", deltas), settings=GenerationSettings(parallel_tool_calls=False)
        )
        [call] = run.state.output
        assert (call["name"], call["call_id"]) == ("now", "call_1")
        assert call["arguments"] == "{}"  # none came: none, in JSON


@pytest.mark.parametrize("finish", [True, False], ids=["finished", "stream-just-ends"])
async def test_a_call_that_takes_no_arguments_is_still_made(finish: bool) -> None:
    """The held call is the answer when nothing follows it: with the upstream's finish,
    and when its stream just ends (a Chat server that sends no ``finish_reason``)."""
    deltas: list[Any] = [ToolCallDelta(0, "call_1", "now", "")]
    a = Named("a", [*deltas, Finish("tool_calls")] if finish else deltas)
    run, _ = await run_over(a)
    [call] = run.state.output
    assert (call["type"], call["name"], call["call_id"]) == ("function_call", "now", "call_1")
    kinds = [type(e).__name__ for e in run.events]
    assert (kinds.count("ItemAdded"), kinds.count("ItemDone")) == (1, 1)


async def test_a_message_opened_and_left_empty_is_an_answer() -> None:
    """An upstream that opens a message and finishes without a token (a Responses
    ``output_item.added`` then ``done``, empty) answers: one empty message, announced
    and done, and the response completed."""
    a = Named("a", [MessageStart("final_answer"), UsageReport(Usage(3, 0)), Finish("stop")])
    run, _ = await run_over(a)
    assert run.state.status == "completed"
    [message] = run.state.output
    assert (message["phase"], message["content"][0]["text"]) == ("final_answer", "")
    kinds = [type(e).__name__ for e in run.events]
    assert kinds[:3] == ["ResponseCreated", "ResponseInProgress", "ItemAdded"]
    assert kinds[-2:] == ["ItemDone", "ResponseFinished"]
    assert run.state.usage == Usage(3, 0)


async def test_max_attempts_bounds_a_round_and_the_last_error_is_the_answer() -> None:
    a = Named("a", [UpstreamError("a down")])
    b = Named("b", [UpstreamUnavailable("b down")])
    c = Named("c", OK)
    run, _ = await run_over(a, b, c, max_attempts=2, stream=False)
    assert run.state.status == "failed"
    assert run.error.code == "upstream_unavailable"
    assert c.requests == []
    assert [x["backend"] for x in run.state.attempts] == ["a", "b"]


def test_recoverable_is_decided_by_class_and_status() -> None:
    assert recoverable(UpstreamRejected("x", status=429))
    assert recoverable(UpstreamRejected("x", status=404))
    assert not recoverable(UpstreamRejected("x", status=400))
    assert not recoverable(UpstreamRejected("x", status=400, code="invalid_value"))
    assert recoverable(UpstreamRejected("x", status=400, code="context_length_exceeded"))
    assert not recoverable(ValueError("a bug"))
    assert recoverable(UpstreamError("x", code="upstream_auth_failed"))


@pytest.mark.parametrize(
    "refusal",
    [
        UpstreamRejected("no such model", status=404, code="model_not_found"),
        UpstreamRejected("body over 1 MB", status=413, code="request_too_large"),
        UpstreamRejected("too long", code="context_length_exceeded"),
        UpstreamContextTooLong("too long", tokens=900, window=512, requested=None),
        UpstreamRejected("not a multimodal model", code="image_input_unsupported"),
    ],
)
async def test_a_refusal_by_a_server_that_is_up_moves_on_and_leaves_its_circuit_closed(
    refusal: GatewayError,
) -> None:
    """A 404 (a served model name that does not match) is the model's absence, a 413 a
    body limit (often a proxy's) the next server may not have, a context too long a
    window smaller than the next candidate's may be, and an image refused a
    text-only model where the next may see: not the server's failure. Each round tries
    the next candidate, and the candidate is not skipped as unhealthy however often it
    happens."""
    a, b = Named("a", [refusal] * 5), Named("b", OK * 5)
    assistant = route(candidate(a), candidate(b, priority=1))
    routing = router(assistant)
    gw = gateway(routing)
    for _ in range(5):
        run = await gw.execute(Principal(), CreateResponse("assistant", [USER]))
        await run.wait()
        assert run.state.status == "completed"
        outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in run.state.attempts]
        assert outcomes == [("a", "failed", refusal.code), ("b", "ok", None)]
    assert routing.state.health.state(assistant.candidates[0].key) == "closed"


async def test_the_gateways_own_full_queue_moves_on_and_leaves_the_circuit_closed() -> None:
    """The gateway's queue for a busy server being full says nothing of the server's
    health: the round moves on, and the candidate is never skipped as unhealthy for it."""
    full = Overloaded("queue full")
    a, b = Named("a", [full] * 5), Named("b", OK * 5)
    assistant = route(candidate(a), candidate(b, priority=1))
    routing = router(assistant)
    gw = gateway(routing)
    for _ in range(5):
        run = await gw.execute(Principal(), CreateResponse("assistant", [USER]))
        await run.wait()
        assert run.state.status == "completed"
        assert [x["backend"] for x in run.state.attempts] == ["a", "b"]
    assert routing.state.health.state(assistant.candidates[0].key) == "closed"


async def test_a_request_whose_every_candidate_is_full_is_refused_before_it_runs() -> None:
    """Refused at admission as its first call would be, but before it costs a run, a
    stored row or a task."""
    a, b = Named("a", OK), Named("b", OK)
    a.places = b.places = 0
    store = MemoryStore()
    gw = gateway(router(route(candidate(a), candidate(b, priority=1))), store)
    command = CreateResponse("assistant", [USER], stream=True)
    with pytest.raises(Overloaded) as refused:
        await gw.execute(Principal(), command)
    assert (refused.value.status, refused.value.code) == (503, "overloaded")
    assert refused.value.headers["Retry-After"] == "1"
    assert "'assistant'" in refused.value.message
    assert store.records == {}
    assert a.requests == b.requests == []
    b.places = None  # one candidate with room is enough
    run = await gw.execute(Principal(), command)
    await run.wait()
    assert run.state.status == "completed"


async def test_runs_started_but_not_yet_driven_count_as_asking_for_a_place() -> None:
    """A burst admitted in one turn of the event loop: each started run's task has not
    yet asked for its connection, but admission counts it as asking."""
    a = Named("a", OK * 3)
    a.places = 1
    gw = gateway(router(route(candidate(a))))
    command = CreateResponse("assistant", [USER], stream=True)
    first = await gw.execute(Principal(), command)  # its task has not run yet
    with pytest.raises(Overloaded):
        await gw.execute(Principal(), command)
    await first.wait()  # driven: it no longer counts
    second = await gw.execute(Principal(), command)
    with pytest.raises(Overloaded):  # counted again while it waits to be driven
        await gw.execute(Principal(), command)
    await second.wait()
    assert [first.state.status, second.state.status] == ["completed", "completed"]


async def test_every_run_of_a_burst_counts_until_it_is_driven() -> None:
    a = Named("a", OK * 2)
    a.places = 2
    gw = gateway(router(route(candidate(a))))
    command = CreateResponse("assistant", [USER], stream=True)
    burst = [await gw.execute(Principal(), command) for _ in range(2)]
    with pytest.raises(Overloaded):
        await gw.execute(Principal(), command)
    for run in burst:
        await run.wait()
    assert [run.state.status for run in burst] == ["completed", "completed"]


async def test_when_every_candidate_refuses_a_context_too_long_the_client_gets_it() -> None:
    """What Codex compacts on: the last candidate's ``context_length_exceeded``."""
    a = Named("a", [UpstreamContextTooLong("a: too long", tokens=900, window=512, requested=None)])
    b = Named("b", [UpstreamRejected("b: too long", code="context_length_exceeded")])
    run, _ = await run_over(a, b, stream=False)
    assert run.state.status == "failed"
    assert (run.error.status, run.error.code, run.error.message) == (
        400,
        "context_length_exceeded",
        "b: too long",
    )
    assert [(x["backend"], x["outcome"]) for x in run.state.attempts] == [
        ("a", "failed"),
        ("b", "failed"),
    ]


async def test_when_every_candidate_lacks_the_model_the_client_gets_the_404() -> None:
    missing = UpstreamRejected("no such model", status=404, code="model_not_found")
    a, b = Named("a", [missing]), Named("b", [missing])
    run, _ = await run_over(a, b, stream=False)
    assert run.state.status == "failed"
    assert (run.error.status, run.error.code) == (404, "model_not_found")
    assert [(x["backend"], x["outcome"]) for x in run.state.attempts] == [
        ("a", "failed"),
        ("b", "failed"),
    ]


def refused_credentials(name: str) -> GatewayError:
    return UpstreamError(f"{name} refused", code="upstream_auth_failed", retryable=False)


@pytest.mark.parametrize("final_first", [True, False])
async def test_a_round_is_told_retryable_when_any_candidate_may_come_back(
    final_first: bool,
) -> None:
    """One server refusing the gateway's credentials and another down for a while: the
    answer, whichever it is, leaves the client its retries (the other may be back)."""
    final, passing = Named("a", [refused_credentials("a")]), Named("b", [UpstreamError("b")])
    run, _ = await run_over(*((final, passing) if final_first else (passing, final)))
    assert run.state.status == "failed"
    assert run.error.retryable
    assert "x-should-retry" not in run.error.headers


@pytest.mark.parametrize(
    "other",
    [
        refused_credentials("a"),
        UpstreamRejected("no such model", status=404, code="model_not_found"),
    ],
)
async def test_a_round_every_candidate_of_which_will_refuse_again_is_told_so(
    other: GatewayError,
) -> None:
    """Another server lacking the model refuses the same request again as well."""
    a, b = Named("a", [other]), Named("b", [refused_credentials("b")])
    run, _ = await run_over(a, b, stream=False)
    assert run.error.code == "upstream_auth_failed"
    assert not run.error.retryable
    assert run.error.headers == {"x-should-retry": "false"}


async def test_a_rounds_wait_past_the_sdks_retries_is_left_out_when_another_may_pass() -> None:
    """The last candidate asks for an hour (a quota), an earlier one was down: the
    client may retry, without that server's hour to sleep through."""
    hour = UpstreamRejected("quota", status=429, headers={"Retry-After": "3600"}, retryable=False)
    a, b = Named("a", [UpstreamUnavailable("down")]), Named("b", [hour])
    run, _ = await run_over(a, b, stream=False)
    assert (run.error.status, run.error.retryable) == (429, True)
    assert run.error.headers == {}


async def test_attempts_are_logged_a_failure_as_a_warning_an_answer_at_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = Named("a", [UpstreamError("500")]), Named("b", OK)
    with caplog.at_level(logging.INFO, logger="stateway.routing"):
        await run_over(a, b)
    assert [(r.levelno, "attempt a/" in r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, True)
    ]
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="stateway.routing"):
        await run_over(Named("c", OK))
    (answered,) = caplog.records
    assert answered.levelno == logging.DEBUG
    assert "attempt c/c-model: ok" in answered.getMessage()
