"""When a response's resource changes: what MCP subscriptions notify about.

A background response is followed through its event log (``WatchResponse``: live from
its run here, or from the stored log while another process runs it): every batch of
events is one change, and its end is the last one. Any other response changes only
when it ends: one still running is read every ``POLL_INTERVAL`` until it has.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from stateway.core.commands import GetResponse, WatchResponse
from stateway.core.errors import InvalidRequest, NotFound
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.core.response import UNFINISHED
from stateway.core.watch import POLL_INTERVAL, Watch


class ResponseUpdates:
    def __init__(
        self,
        gateway: Gateway,
        principal: Principal,
        response_id: str,
        watch: Watch | None,
        ended: bool = False,
    ) -> None:
        self._gateway = gateway
        self._principal = principal
        self._response_id = response_id
        self._watch = watch
        self._ended = ended

    @classmethod
    async def open(
        cls, gateway: Gateway, principal: Principal, response_id: str
    ) -> ResponseUpdates:
        """Raises :class:`~stateway.core.errors.NotFound` for an unknown response."""
        try:
            watch = await gateway.execute(principal, WatchResponse(response_id))
        except InvalidRequest:  # not a background response: it has no log to follow
            state = await gateway.execute(principal, GetResponse(response_id))
            ended = state.status not in UNFINISHED
            return cls(gateway, principal, response_id, None, ended)
        return cls(gateway, principal, response_id, watch)

    async def changes(self) -> AsyncIterator[None]:
        """Yield once per change; the last one is the response's end (a response that
        had ended already never changes)."""
        if self._ended:
            return
        if self._watch is not None:
            try:
                async for _ in self._watch.batches():
                    yield
            except NotFound:  # deleted meanwhile: a change, and the last
                yield
            return
        command = GetResponse(self._response_id)
        while True:  # running in the foreground (here or elsewhere): read until it ended
            state = await self._gateway.execute(self._principal, command)
            if state.status not in UNFINISHED:
                yield
                return
            await asyncio.sleep(POLL_INTERVAL)
