"""The error a round every candidate failed answers with: the last candidate's, unless
that is a refusal of a server that is up saying nothing of the route (a model it lacks,
a body over its proxy's limit) after an earlier candidate's server failed."""

from __future__ import annotations

import pytest

from stateway.core.commands import CreateResponse
from stateway.core.errors import (
    GatewayError,
    UpstreamContextTooLong,
    UpstreamError,
    UpstreamRejected,
    UpstreamUnavailable,
)
from stateway.core.principal import Principal
from tests.core.routing_fakes import Named, candidate, gateway, route, router

USER = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
MISSING = UpstreamRejected("no such model", status=404, code="model_not_found")
TOO_LARGE = UpstreamRejected("body over 1 MB", status=413, code="request_too_large")


async def failed_with(*failures: GatewayError) -> GatewayError:
    backends = [Named(f"n{i}", [failure]) for i, failure in enumerate(failures)]
    tiers = [candidate(b, priority=i) for i, b in enumerate(backends)]
    command = CreateResponse("route", [USER], stream=False)
    routing = router(route(*tiers, name="route"))
    run = await gateway(routing).execute(Principal(), command)
    await run.wait()
    assert run.state.status == "failed"
    assert [x["outcome"] for x in run.state.attempts] == ["failed"] * len(failures)
    assert run.error is not None
    return run.error


@pytest.mark.parametrize("refusal", [MISSING, TOO_LARGE])
async def test_a_server_failure_is_told_over_a_later_servers_refusal_of_its_own(
    refusal: GatewayError,
) -> None:
    """A client told 404 would take its model for one that does not exist, and not retry;
    the first server's failure is what kept the route from answering."""
    down = UpstreamUnavailable("The model server 'n0' is unreachable.")
    told = await failed_with(down, refusal)
    assert (told.status, told.code) == (down.status, down.code)
    told = await failed_with(UpstreamError("500"), refusal, MISSING)
    assert told.code == "upstream_error"


async def test_the_last_failure_is_told_otherwise() -> None:
    assert (await failed_with(MISSING, MISSING)).code == "model_not_found"
    assert (await failed_with(MISSING, UpstreamError("500"))).code == "upstream_error"
    limited = UpstreamRejected("slow down", status=429, code="rate_limit_exceeded")
    assert (await failed_with(UpstreamError("500"), limited)).code == "rate_limit_exceeded"
    too_long = UpstreamContextTooLong("too long", tokens=900, window=512, requested=None)
    # what the client acts on (Codex compacts; another candidate may then answer)
    assert (await failed_with(UpstreamError("500"), too_long)).code == "context_length_exceeded"
