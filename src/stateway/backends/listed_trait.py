"""What a model server's listing (``GET /models``) tells of the server itself, beyond its
models: whether it forces a named ``tool_choice`` as named
(:mod:`stateway.backends.named_choice`), whether it is llama.cpp's ``llama-server``
(:mod:`stateway.backends.anthropic_tool_choice`).

Learned once per backend: from the listing the window discovery reads, else asked by the
first call that needs it (the calls meanwhile wait for that answer). A server refusing its
listing lacks the trait (nothing tells it has it), and is not asked again. While no answer
comes (the server unreachable or still loading, a 5xx, a 429, the gateway's credentials
refused) it is taken to lack it, and the next call that needs it asks again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from stateway.backends.upstream_http import UpstreamClient
from stateway.core.errors import GatewayError, UpstreamRejected


class ListedTrait:
    """Whether the server behind ``client`` has the trait ``tells`` reads in a listing's
    ``data``."""

    __slots__ = ("_asking", "_client", "_tells", "known")

    def __init__(self, client: UpstreamClient, tells: Callable[[Sequence[object]], bool]) -> None:
        self._client = client
        self._tells = tells
        self.known: bool | None = None
        """Whether it has it; None while its listing has not told."""
        self._asking = asyncio.Lock()
        """Held while the listing is asked: one asking at a time."""

    def learn(self, listing: Sequence[object]) -> None:
        """Learn it from ``listing`` (the ``data`` of the server's ``GET /models``)."""
        self.known = self._tells(listing)

    async def held(self) -> bool:
        """Whether it has it, its listing asked unless known: False while none answers."""
        if self.known is None:
            async with self._asking:
                if self.known is None:
                    await self._ask()
        return self.known is True

    async def _ask(self) -> None:
        try:
            _, page = await self._client.model_page()
        except UpstreamRejected as exc:
            if exc.status != 429:  # no listing to read: nothing tells it has it
                self.known = False
            return
        except GatewayError:  # no answer: asked again by the next call that needs it
            return
        self.learn(page["data"])
