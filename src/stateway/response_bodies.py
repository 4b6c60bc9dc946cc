"""An HTTP answer's body read whole, up to a cap (aiohttp, the client side): what the
gateway reads of a search provider's or an identity provider's answer. An answer larger
than the cap is refused as soon as that is known (its ``Content-Length``, or the bytes
read so far), never held in memory whole."""

from __future__ import annotations

import aiohttp


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes | None:
    """The whole body, or None as soon as it is known to exceed ``limit`` bytes."""
    declared = response.content_length
    if declared is not None and declared > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_any():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)
