"""A rough count of a request's input tokens, for upstreams that cannot count them.

About four bytes of JSON per token (the rule of thumb for English text and code under
BPE tokenizers): the instructions, every item of the context and the offered tools,
serialized as the gateway holds them (less the output tokens stored with earlier
answers, which the model is not sent: :mod:`stateway.core.logprobs`). Good enough to size
a context, not to bill. It also decides ``context_management`` thresholds and ``truncation: "auto"``
(:mod:`stateway.core.compaction`).
"""

from __future__ import annotations

import orjson

from stateway.core.inference import InferenceRequest
from stateway.core.items import Item
from stateway.core.logprobs import without_tokens

BYTES_PER_TOKEN = 4


def estimate_tokens(request: InferenceRequest) -> int:
    return estimate_context(request.instructions, request.items, request.tools)


def estimate_context(instructions: str | None, items: list[Item], tools: list[Item]) -> int:
    """The same estimate, of a context not yet made into a request (compaction thresholds,
    ``truncation: "auto"``)."""
    size = len(instructions.encode()) if instructions else 0
    size += len(orjson.dumps([without_tokens(item) for item in items]))
    size += len(orjson.dumps(tools))
    return max(1, -(-size // BYTES_PER_TOKEN))


def item_tokens(item: Item) -> int:
    """The estimated tokens of one item (its JSON at the same rate, rounded up)."""
    return -(-len(orjson.dumps(without_tokens(item))) // BYTES_PER_TOKEN)
