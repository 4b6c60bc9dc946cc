"""``Idempotency-Key`` on the stateless creates (``POST /v1/chat/completions``,
``POST /v1/messages``): a retried request gets the first one's answer, and the model is
asked once.

Nothing of these answers is stored, so what a retry gets is remembered with the key
(:mod:`stateway.core.exactly_once`): a whole answer's JSON body, byte for byte, as
:mod:`.idempotency` remembers any REST write's; a streamed answer's events, all of them,
as its protocol's stream encoder wrote them for the first client (its keep-alives
aside), which a retry gets as one stream of the same events. The key is claimed before
the run starts, so a retry arriving meanwhile waits for the first answer: a stream's
until its end. A keyed run goes on when its client leaves (its retry takes over), and a
request that failed (refused, its run failed or cancelled) leaves no answer behind: its
retry runs again. A Chat request its route forwards untouched (the fast path) is relayed
as without the key, its body remembered as it went out (:mod:`.keyed_relay`): a relay
ends with its client, and then leaves nothing behind either.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.backend import Relay
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.http.idempotency import PARAM
from stateway.surfaces.http.sse import Chunks, SSEResponse

_UNANSWERED = frozenset({"failed", "cancelled"})


@dataclass(frozen=True, slots=True)
class KeyedCreate:
    """How a route answers a keyed create of its protocol."""

    stream: bool
    start: Callable[[], Awaitable[Run | Relay]]
    """The run, started in a task of its own (not attached: its client leaving cancels
    nothing); or the upstream's answer to the request forwarded untouched (Chat's fast
    path)."""
    whole: Callable[[Run], JSONResponse]
    """A non-streamed run's answer, once it ended; raises its error when it failed."""
    live: Callable[[Run], ASGIApp]
    """A streamed run's answer as it runs (its error before any output answered in the
    protocol's shape); its client leaving cancels nothing."""
    recorded: Callable[[Run], bytes]
    """A streamed run's events, once it ended, as its stream encoder writes them."""
    headers: dict[str, str] = field(default_factory=dict)
    """What a replayed answer carries besides its body (Messages: its ``request-id``)."""
    relayed: Callable[[Relay], Awaitable[bytes | None]] | None = None
    """Answer with a relay as without the key; its body to remember, if it ended well
    (:func:`~.keyed_relay.relayed_once`). None: the route relays nothing."""


async def created_once(
    gateway: Gateway,
    principal: Principal,
    key: str,
    digest: str,
    create: KeyedCreate,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> ASGIApp | None:
    """The answer to ``create`` sent with ``key``: the first answer remembered, to send;
    or None when this request streamed its run's answer itself (its first attempt).
    Raises what refused the request before its answer began (a key reused with another
    request: 409), for the route to answer in its protocol's shape."""
    async with gateway.once(principal, key, digest, param=PARAM) as once:
        if once.outcome is not None:
            return replayed(once.outcome.body, create)
        started = await create.start()
        if not isinstance(started, Run):  # relayed as it came, kept as it went out
            assert create.relayed is not None  # a route that forwards says how it relays
            relayed = await create.relayed(started)
            if relayed is not None:
                once.remember(relayed)
            return None
        run = started
        if not create.stream:
            await run.wait()
            answer = create.whole(run)
            if run.state.status not in _UNANSWERED:
                once.remember(bytes(answer.body))
            return answer
        await create.live(run)(scope, receive, send)
        await run.wait()  # its client may have left: the run went on for a retry
        if run.error is None and run.state.status not in _UNANSWERED:
            once.remember(create.recorded(run))
        return None


def replayed(body: bytes, create: KeyedCreate) -> ASGIApp:
    """The first answer again: its JSON body, or its stream's events in one chunk."""
    if not create.stream:
        return Response(body, media_type=JSONResponse.media_type, headers=create.headers)
    return SSEResponse(_once(body), stay, headers=create.headers)


async def _once(body: bytes) -> Chunks:
    yield body, True


def stay() -> None:
    """What a keyed stream's client leaving does: nothing. Its run goes on for its retry
    to take over; a replay's leaving changes nothing either."""
