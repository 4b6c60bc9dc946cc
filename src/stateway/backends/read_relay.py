"""A relayed answer read to its end before any of it goes out: an upstream's error body
the Chat Completions fast path judges first (:meth:`OpenAIChatBackend.forward_chat
<stateway.backends.chat_forwarder.OpenAIChatBackend.forward_chat>`: LM Studio's refusal
of null content is sent again, not relayed). Any other goes out as it would have, chunk
by chunk as they were read; what the relay tells of it (its usage, its failure on the
circuit) it tells as it would."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

from stateway.backends.upstream_relay import UpstreamRelay
from stateway.core.errors import GatewayError
from stateway.core.usage import Usage


class ReadRelay:
    """``relay``, its body already read (:meth:`of`)."""

    __slots__ = ("_relay", "headers", "read", "status", "whole")

    def __init__(self, relay: UpstreamRelay, read: list[bytes]) -> None:
        self._relay = relay
        self.status: int = relay.status
        self.headers: Mapping[str, str] = relay.headers
        self.whole: bool = relay.whole
        self.read = read
        """The body's chunks, as they were read."""

    @classmethod
    async def of(cls, relay: UpstreamRelay) -> ReadRelay:
        """``relay`` read to its end. Raises what reading it raises
        (:meth:`UpstreamRelay.chunks`), the relay closed."""
        try:
            read = [chunk async for chunk in relay.chunks()]
        except BaseException:
            await relay.aclose()
            raise
        return cls(relay, read)

    async def body(self) -> bytes:
        return b"".join(self.read)

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in self.read:
            yield chunk

    def usage(self) -> Usage | None:
        return self._relay.usage()

    def output_estimate(self) -> int:
        return self._relay.output_estimate()

    def failure(self) -> GatewayError | None:
        return self._relay.failure()

    async def aclose(self) -> None:
        await self._relay.aclose()
