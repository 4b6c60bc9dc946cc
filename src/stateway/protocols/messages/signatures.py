"""A thinking block whose signature does not open, named by its path as Anthropic names it:
``messages.1.content.0: Invalid `signature` in `thinking` block``.

The core refuses a reasoning item whose ``encrypted_content`` the gateway sealed but that
does not open for the tenant (``invalid_encrypted_content``), naming it by its place among
the canonical items (``input[3].encrypted_content``), which a Messages client never saw.
That item holds the block's signature (a redacted block's ``data``, after
:data:`~stateway.core.reasoning.REDACTED`), by which the block is found in the request as
the client sent it: the first ``thinking`` block with that signature, or
``redacted_thinking`` block with that data. A seal of an earlier turn that a thread holds
is named by no path (:mod:`.errors` then says ``messages``).
"""

from __future__ import annotations

import re
from typing import Any, Final

from stateway.core.compaction.sealed import INVALID_CODE
from stateway.core.errors import GatewayError, InvalidRequest
from stateway.core.items import Item
from stateway.core.reasoning import REDACTED
from stateway.protocols.messages.sent_blocks import sent_blocks

_INPUT_ITEM: Final = re.compile(r"input\[(\d+)\]")


def signed_block(error: GatewayError, items: list[Item], raw: bytes) -> GatewayError:
    """``error`` for the Messages request ``raw``, decoded as ``items``: a seal that does
    not open, of an item of the request, names its block by its path
    (``messages.N.content.M``); any other error is left as it is."""
    if not isinstance(error, InvalidRequest) or error.code != INVALID_CODE:
        return error
    found = _INPUT_ITEM.match(error.param or "")
    index = int(found.group(1)) if found is not None else len(items)
    seal = items[index].get("encrypted_content") if index < len(items) else None
    path = _block_sealed(raw, seal) if isinstance(seal, str) else None
    if path is None:
        return error
    return InvalidRequest(error.message, param=path, code=error.code)


def _block_sealed(raw: bytes, seal: str) -> str | None:
    """The path of the first block of ``raw``'s messages whose signature (or redacted
    data) is ``seal``, as a reasoning item holds it."""
    for n, m, block in sent_blocks(raw):
        if _held(block) == seal:
            return f"messages.{n}.content.{m}"
    return None


def _held(block: dict[str, Any]) -> object:
    """What a reasoning item decoded from ``block`` holds as its ``encrypted_content``."""
    kind = block.get("type")
    if kind == "thinking":
        return block.get("signature")
    if kind == "redacted_thinking" and isinstance(block.get("data"), str):
        return REDACTED + block["data"]
    return None
