"""A rough count of a request's input tokens, for upstreams that cannot count them.

About four bytes of JSON per token (the rule of thumb for English text and code under
BPE tokenizers): the instructions, every item of the context and the offered tools,
serialized as the gateway holds them. Good enough to size a context, not to bill.
"""

from __future__ import annotations

import orjson

from stateway.core.inference import InferenceRequest

BYTES_PER_TOKEN = 4


def estimate_tokens(request: InferenceRequest) -> int:
    size = len(request.instructions.encode()) if request.instructions else 0
    size += len(orjson.dumps(request.items)) + len(orjson.dumps(request.tools))
    return max(1, -(-size // BYTES_PER_TOKEN))
