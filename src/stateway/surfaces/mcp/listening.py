"""A 2026-07-28 ``subscriptions/listen`` stream's parts: the resources it follows, each
once and at most :data:`~.limits.MAX_LISTENED` of them (one request names them all, and
each is a response read or watched while it runs), and the bus their updates are
published to."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from mcp.server.subscriptions import InMemorySubscriptionBus, ServerEvent
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, SubscriptionsListenRequestParams

from stateway.surfaces.mcp.limits import MAX_LISTENED


def listened(params: SubscriptionsListenRequestParams) -> SubscriptionsListenRequestParams:
    """``params`` naming each resource once (as the stream's acknowledgment then does);
    refused (-32602) when they name more than :data:`MAX_LISTENED`."""
    uris = list(dict.fromkeys(params.notifications.resource_subscriptions or ()))
    if len(uris) > MAX_LISTENED:
        raise MCPError(
            INVALID_PARAMS,
            f"A listen stream follows at most {MAX_LISTENED} resources; {len(uris)} were named.",
        )
    if not uris:
        return params
    notifications = params.notifications.model_copy(update={"resource_subscriptions": uris})
    return params.model_copy(update={"notifications": notifications})


class ListenBus(InMemorySubscriptionBus):
    """A listen stream's own bus; ``listening`` is set once its handler subscribed (an
    event published before that would be lost)."""

    def __init__(self) -> None:
        super().__init__()
        self.listening = asyncio.Event()

    def subscribe(self, listener: Callable[[ServerEvent], None]) -> Callable[[], None]:
        unsubscribe = super().subscribe(listener)
        self.listening.set()
        return unsubscribe
