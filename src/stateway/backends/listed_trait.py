"""What a model server's listing (``GET /models``) tells of the server itself, beyond its
models: whether it forces a named ``tool_choice`` as named
(:mod:`stateway.backends.named_choice`), whether it is llama.cpp's ``llama-server``
(:mod:`stateway.backends.anthropic_tool_choice`).

Learned once per backend: from the listing the window discovery reads, else asked by the
first call that needs it, within :data:`WITHIN` seconds (the calls meanwhile wait for that
answer, no longer). A server refusing its listing lacks the trait (nothing tells it has
it), and is not asked again. While no answer comes (the server unreachable, hanging or
still loading, a 5xx, a 429, the gateway's credentials refused) it is taken to lack it,
and the calls go on so without asking: the listing is asked again by the first call once
a back-off has passed, :data:`FIRST_BACK_OFF` after the first failure, twice as long after
each next one, up to :data:`LONGEST_BACK_OFF`. Else a listing that hangs would hold up
every such call, one after the other, each asking in turn.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from stateway.backends.upstream_http import UpstreamClient
from stateway.core.errors import GatewayError, UpstreamRejected

WITHIN = 2.0
"""Seconds a call's asking of the listing may take: a live server answers it at once."""
FIRST_BACK_OFF = 1.0
"""Seconds no call asks after the listing's first failure."""
LONGEST_BACK_OFF = 60.0
"""The longest back-off, reached by doubling after each failure in a row."""


class ListedTrait:
    """Whether the server behind ``client`` has the trait ``tells`` reads in a listing's
    ``data``."""

    __slots__ = (
        "_again",
        "_asking",
        "_back_off",
        "_client",
        "_clock",
        "_tells",
        "_within",
        "known",
    )

    def __init__(
        self,
        client: UpstreamClient,
        tells: Callable[[Sequence[object]], bool],
        *,
        within: float = WITHIN,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``within``: seconds an asking may take; ``clock``: monotonic seconds (tests move
        it)."""
        self._client = client
        self._tells = tells
        self._within = within
        self._clock = clock
        self.known: bool | None = None
        """Whether it has it; None while its listing has not told."""
        self._asking = asyncio.Lock()
        """Held while the listing is asked: one asking at a time."""
        self._again = float("-inf")
        """When (on ``clock``) the listing may be asked again after a failure."""
        self._back_off = FIRST_BACK_OFF
        """The back-off after the next failure."""

    def learn(self, listing: Sequence[object]) -> None:
        """Learn it from ``listing`` (the ``data`` of the server's ``GET /models``)."""
        self.known = self._tells(listing)

    async def held(self) -> bool:
        """Whether it has it, its listing asked unless known or backing off: False while
        none answers."""
        if self._unknown():
            async with self._asking:
                if self._unknown():  # the one asking before failed: backing off now
                    await self._ask()
        return self.known is True

    def _unknown(self) -> bool:
        """Whether the listing is to be asked: not known, and not backing off."""
        return self.known is None and self._clock() >= self._again

    async def _ask(self) -> None:
        try:
            _, page = await self._client.model_page(within=self._within)
        except UpstreamRejected as exc:
            if exc.status == 429:
                self._failed()
            else:  # no listing to read: nothing tells it has it
                self.known = False
        except GatewayError:  # no answer: asked again after the back-off
            self._failed()
        else:
            self.learn(page["data"])

    def _failed(self) -> None:
        self._again = self._clock() + self._back_off
        self._back_off = min(2 * self._back_off, LONGEST_BACK_OFF)
