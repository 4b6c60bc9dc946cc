"""Rate limits: requests and tokens per minute for each principal, as token buckets.

Each principal (tenant and scope: an API key, a token's subject) has one bucket per limit,
holding at most a minute's allowance and refilled continuously at a sixtieth of it per
second, so a burst of a whole minute's allowance passes and then requests pace out.
The buckets live behind :class:`TokenBuckets`: in process (one gateway) or in Redis,
where every replica takes from the same buckets atomically.

- ``requests_per_minute``: each model request (``Gateway.execute`` of a create, a Chat
  Completions or Messages request, a compaction) takes one from its principal's bucket
  before anything runs; an empty bucket is a 429 with ``Retry-After``. A prewarm
  (WebSocket mode's ``generate: false``) asks no model and takes none.
- ``tokens_per_minute``: a model request is admitted while its principal's token bucket
  is not empty, and a run's tokens (input and output, as its usage reports them) are
  taken out when it ends (a compaction's when it returns), which may leave the bucket
  in debt: the next requests wait until it has refilled past zero. A run whose upstream
  never counted (a client that left just before the usage chunk, a cut answer) is charged
  its output, estimated, and, when its output had begun, its prompt, which the model read
  (:func:`charged_tokens`); so is the output of a last round cut short after rounds that
  were counted. A request forwarded untouched to a Chat Completions upstream is charged
  the tokens its answer reports once relayed (a stream reports them only when its client
  asked, ``stream_options.include_usage``: one that did not is translated instead, so
  that the gateway's own run counts them).
- ``concurrent_requests``: each model request holds one of its principal's slots from
  its admission until what it started ends (:mod:`.concurrency`); with every slot held,
  the next is a 429 (``Retry-After: 1``). Admission asks in an order that takes nothing
  for a request it then refuses: the token bucket (taking nothing), the request bucket
  without taking (when both it and the slots are limited), a slot, then the request; a
  request the request bucket refuses in that last step (another of the principal's took
  the last meanwhile) gives its slot back at once.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from typing import Final, Protocol

from stateway.core.concurrency import RequestSlots, Slot
from stateway.core.coordination import joined_key
from stateway.core.errors import RateLimited
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.token_estimate import item_tokens
from stateway.core.usage import Usage

CLOSING_WAIT: Final = 10.0
"""Seconds closing waits for the charges and give-backs under way (each Redis call is
bounded by ``redis_timeout`` already)."""
ANY: Final = -math.inf
"""A ``need`` every bucket meets: the debit is taken whatever the bucket holds."""


class TokenBuckets(Protocol):
    async def take(self, key: str, per_minute: int, need: float, debit: float) -> float:
        """Refill ``key``'s bucket (full at ``per_minute``, refilled at ``per_minute/60``
        a second) for the time since it was last used; then, when it holds at least
        ``need``, take ``debit`` out and return 0.0; else take nothing and return the
        seconds until it will hold ``need``."""
        ...

    async def aclose(self) -> None: ...


class RateLimits:
    def __init__(
        self,
        buckets: TokenBuckets,
        requests_per_minute: int | None = None,
        tokens_per_minute: int | None = None,
        *,
        slots: RequestSlots | None = None,
        concurrent_requests: int | None = None,
    ) -> None:
        """``slots`` keep the ``concurrent_requests`` each principal may have in flight
        (both or neither)."""
        assert (slots is None) == (concurrent_requests is None)
        self._buckets = buckets
        self._requests = requests_per_minute
        self._tokens = tokens_per_minute
        self._slots = slots
        self._concurrent = concurrent_requests
        self._charging: set[asyncio.Task[None]] = set()
        self._holding: set[asyncio.Task[None]] = set()

    @property
    def counts_tokens(self) -> bool:
        return self._tokens is not None

    async def admit(self, principal: Principal) -> Slot | None:
        """Let one model request of ``principal`` through, or raise :class:`RateLimited`:
        the slot it holds (None: concurrency is not limited), for its caller to give back.
        The token bucket is checked first: a request refused for tokens takes no request."""
        if self._tokens is not None:
            wait = await self._buckets.take(_key("tokens", principal), self._tokens, 1, 0)
            if wait > 0:
                raise RateLimited("tokens", self._tokens, wait)
        if self._slots is None:
            await self._take_request(principal)
            return None
        return await self._take_slot(self._slots, principal)

    async def _take_slot(self, slots: RequestSlots, principal: Principal) -> Slot:
        """A slot of ``principal``, and a request of its bucket: refused for either,
        neither is held."""
        assert self._concurrent is not None
        if self._requests is not None:  # a refusal here takes no slot
            wait = await self._buckets.take(_key("requests", principal), self._requests, 1, 0)
            if wait > 0:
                raise RateLimited("requests", self._requests, wait)
        slot = await slots.take(_key("concurrent", principal), self._concurrent)
        if slot is None:
            raise RateLimited.concurrent(self._concurrent)
        try:
            await self._take_request(principal)
        except BaseException:
            slot.release()
            raise
        return slot

    async def _take_request(self, principal: Principal) -> None:
        if self._requests is not None:
            wait = await self._buckets.take(_key("requests", principal), self._requests, 1, 1)
            if wait > 0:
                raise RateLimited("requests", self._requests, wait)

    def release_after(self, slot: Slot, ended: Callable[[], Awaitable[object]]) -> None:
        """Give ``slot`` back once ``ended()`` is done (a run's end), if it is not yet: a
        run finishing gives it back before its end is told (:attr:`Run.before_end
        <stateway.core.runs.Run.before_end>`); this is for one closed without finishing."""

        async def release() -> None:
            try:
                await ended()
            finally:
                slot.release()

        task = asyncio.create_task(release())
        self._holding.add(task)
        task.add_done_callback(self._holding.discard)

    async def charge(self, principal: Principal, tokens: int) -> None:
        """Take the ``tokens`` a run of ``principal`` used out of its token bucket."""
        if self._tokens is not None and tokens > 0:
            await self._buckets.take(_key("tokens", principal), self._tokens, ANY, tokens)

    def charge_after(
        self,
        principal: Principal,
        ended: Callable[[], Awaitable[object]] | None,
        tokens: Callable[[], int],
    ) -> None:
        """Take ``tokens()`` out of ``principal``'s bucket once ``ended()`` is done (None:
        at once), beside the answer: a bucket in Redis is a round trip."""
        if self._tokens is None:
            return

        async def charge() -> None:
            if ended is not None:
                await ended()
            await self.charge(principal, tokens())

        task = asyncio.create_task(charge())
        self._charging.add(task)
        task.add_done_callback(self._charging.discard)

    async def settled(self) -> None:
        """Once the charges under way are taken (tests, shutdown)."""
        await asyncio.gather(*self._charging)

    async def aclose(self) -> None:
        """Close the buckets and slots once the charges and give-backs under way are done
        (at shutdown, after every run ended), or :data:`CLOSING_WAIT` seconds have
        passed: closed first, a Redis charge in flight would be lost."""
        pending = self._charging | self._holding
        if pending:
            await asyncio.wait(pending, timeout=CLOSING_WAIT)
        await self._buckets.aclose()
        if self._slots is not None:
            await self._slots.aclose()


def charged_tokens(state: ResponseState) -> int:
    """The tokens a run is charged: its usage's input and output tokens; its output's,
    estimated, when no upstream counted any (a client that left mid-stream, a cut
    answer: upstreams count an answer's output at its end), so that leaving just before
    the end does not make an answer free, and otherwise the output of its round cut
    short, estimated (:attr:`~stateway.core.response.ResponseState.uncounted_output_from`:
    an answer left after a tool round that was counted); and the prompts of rounds cut
    short after their output began that no upstream counted
    (:attr:`~stateway.core.response.ResponseState.uncounted_input`), which the model read
    whole. A run that produced nothing and counted nothing is charged nothing."""
    usage = state.usage or Usage()
    cut = state.uncounted_output_from
    if not usage.output_tokens:
        output = sum(item_tokens(item) for item in state.output)
    elif cut is None:
        output = usage.output_tokens
    else:
        output = usage.output_tokens + sum(item_tokens(item) for item in state.output[cut:])
    return usage.input_tokens + output + state.uncounted_input


def _key(kind: str, principal: Principal) -> str:
    return joined_key(kind, principal.tenant_id, principal.scope)
