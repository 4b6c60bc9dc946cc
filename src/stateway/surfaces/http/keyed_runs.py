"""``Idempotency-Key`` on the stateless creates (``POST /v1/chat/completions``,
``POST /v1/messages``): a retried request gets the first one's answer, and the model is
asked once.

Nothing of these answers is stored, so what a retry gets is remembered with the key
(:mod:`stateway.core.exactly_once`): a whole answer's JSON body, byte for byte, as
:mod:`.idempotency` remembers any REST write's; a streamed answer's events, all of them,
as its protocol's stream encoder wrote them for the first client (its keep-alives
aside), which a retry gets as one stream of the same events. The key is claimed before
the run starts, so a retry arriving meanwhile waits for the first answer: a stream's
until its end, its own stream held open meanwhile once it has waited a keep-alive
interval (:mod:`.keyed_waits`), its answer following in it. A keyed run goes on when
its client leaves (its retry takes over), and a request that failed (refused, its run
failed or cancelled) leaves no answer behind: its retry runs again. A Chat request its
route forwards untouched (the fast path) is relayed as without the key, its body
remembered as it went out (:mod:`.keyed_relay`): a relay ends with its client, and then
leaves nothing behind either.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from stateway.core.backend import Relay
from stateway.core.errors import GatewayError
from stateway.core.exactly_once import Attempt
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.runs import Run
from stateway.surfaces.asgi.answers import JSONResponse
from stateway.surfaces.http.idempotency import PARAM
from stateway.surfaces.http.keyed_waits import WaitingStream
from stateway.surfaces.http.sse import (
    COMMENT,
    KEEPALIVE_INTERVAL,
    Chunks,
    Ending,
    SSEResponse,
    send_ending,
)
from stateway.surfaces.http.transport import DisconnectWatch

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
    live: Callable[[Run, bool], ASGIApp]
    """A streamed run's answer as it runs (its error before any output answered in the
    protocol's shape); its client leaving cancels nothing. True: in a stream already open
    (:class:`~.keyed_waits.WaitingStream`), that error its ``ending``."""
    recorded: Callable[[Run], bytes]
    """A streamed run's events, once it ended, as its stream encoder writes them."""
    ending: Ending
    """A stream's error event: what a streamed retry whose stream opened while it waited
    gets in place of an error status."""
    keepalive: float = KEEPALIVE_INTERVAL
    idle_frame: bytes = COMMENT
    """A stream's keep-alive (Messages: a ``ping`` event), every ``keepalive`` seconds."""
    headers: dict[str, str] = field(default_factory=dict)
    """What a replayed answer carries besides its body (Messages: its ``request-id``)."""
    relayed: Callable[[Relay, bool], Awaitable[bytes | None]] | None = None
    """Answer with a relay as without the key (True: in a stream already open); its body
    to remember, if it ended well (:func:`~.keyed_relay.relayed_once`). None: the route
    relays nothing."""


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
    or None when this request streamed its answer itself (its first attempt, or a retry
    whose stream opened while it waited: :mod:`.keyed_waits`). Raises what refused the
    request before its answer began (a key reused with another request: 409), for the
    route to answer in its protocol's shape; and :class:`ClientDisconnect` when a
    streamed request's client left while it waited for its key."""
    if not create.stream:
        return await _answered_once(gateway, principal, key, digest, create)
    waiting = WaitingStream(send, create.keepalive, create.idle_frame, create.headers, scope)
    watch = DisconnectWatch(receive)  # a client leaving ends the wait: nothing to cancel
    try:
        claimed = gateway.once(principal, key, digest, param=PARAM, waiting=waiting.waits)
        async with claimed as once:
            watch.stop()
            opened = await waiting.end()
            if once.outcome is None:
                await _streamed(create, once, opened, scope, receive, send)
                return None
            answer = replayed(once.outcome.body, create, opened)
            if not opened:
                return answer
            await answer(scope, receive, send)  # in its stream, watched as any stream
            return None
    except asyncio.CancelledError:
        revoked = waiting.revoked()
        if watch.left():
            raise ClientDisconnect from None
        if revoked is None:
            raise
        await _last(waiting, send, create.ending, revoked)
        return None
    except GatewayError as error:  # before its answer began: its error status, if it can
        if not waiting.stop():
            raise
        await _last(waiting, send, create.ending, error)
        return None
    finally:
        watch.stop()
        await waiting.end()


async def _answered_once(
    gateway: Gateway, principal: Principal, key: str, digest: str, create: KeyedCreate
) -> ASGIApp | None:
    """A non-streamed create's answer (JSON has no keep-alive: a retry waits for it in
    silence), remembered whole; None when relayed."""
    async with gateway.once(principal, key, digest, param=PARAM) as once:
        if once.outcome is not None:
            return replayed(once.outcome.body, create)
        run = await create.start()
        if not isinstance(run, Run):
            await _relayed(create, once, run, False)
            return None
        await run.wait()
        answer = create.whole(run)
        if run.state.status not in _UNANSWERED:
            once.remember(bytes(answer.body))
        return answer


async def _streamed(
    create: KeyedCreate, once: Attempt, opened: bool, scope: Scope, receive: Receive, send: Send
) -> None:
    """Stream the first answer to a keyed stream (``opened``: in the stream already
    open), and remember it once it ended well."""
    started = await create.start()
    if not isinstance(started, Run):
        await _relayed(create, once, started, opened)
        return
    run = started
    await create.live(run, opened)(scope, receive, send)
    await run.wait()  # its client may have left: the run went on for a retry
    if run.error is None and run.state.status not in _UNANSWERED:
        once.remember(create.recorded(run))


async def _relayed(create: KeyedCreate, once: Attempt, relay: Relay, opened: bool) -> None:
    """Answer with ``relay`` as it came, its body remembered as it went out."""
    assert create.relayed is not None  # a route that forwards says how it relays
    relayed = await create.relayed(relay, opened)
    if relayed is not None:
        once.remember(relayed)


async def _last(waiting: WaitingStream, send: Send, ending: Ending, error: GatewayError) -> None:
    """End a stream opened while its request waited with ``error``'s event, its last
    keep-alive out first, a client slow to read them waited for a while only
    (:func:`~.sse.send_ending`); quietly nothing when its client left."""
    with contextlib.suppress(OSError):
        await send_ending(send, ending(error), error.code, after=waiting.end)


def replayed(body: bytes, create: KeyedCreate, opened: bool = False) -> ASGIApp:
    """The first answer again: its JSON body, or its stream's events in one chunk
    (``opened``: in a stream open already, its credential watched as any stream's, which
    may cut it short)."""
    if not create.stream:
        return Response(body, media_type=JSONResponse.media_type, headers=create.headers)
    if not opened:
        return SSEResponse(_once(body), stay, headers=create.headers)
    return SSEResponse(
        _cut_short(body),
        stay,
        keepalive=create.keepalive,
        idle_frame=create.idle_frame,
        ending=create.ending,
        opened=True,
    )


async def _once(body: bytes) -> Chunks:
    yield body, True


async def _cut_short(body: bytes) -> Chunks:
    """``body`` as a chunk its stream's end may cut short (its credential revoked while
    its client reads it), then the end of the stream."""
    yield body, False


def stay() -> None:
    """What a keyed stream's client leaving does: nothing. Its run goes on for its retry
    to take over; a replay's leaving changes nothing either."""
