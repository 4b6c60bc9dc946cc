"""A rough count of a request's input tokens, for upstreams that cannot count them.

About four bytes of JSON per token (the rule of thumb for English text and code under
BPE tokenizers): the instructions, every item of the context and the offered tools,
serialized as the gateway holds them (less the output tokens stored with earlier
answers, which the model is not sent: :mod:`stateway.core.logprobs`), but for images,
which count :data:`IMAGE_TOKENS` each (:data:`LOW_DETAIL_IMAGE_TOKENS` at ``detail:
"low"``): their base64 data is no text the model reads, and at four bytes a token a
screenshot would count as a long book. Good enough to size a context, not to bill. It
also decides ``context_management`` thresholds and ``truncation: "auto"``
(:mod:`stateway.core.compaction`).
"""

from __future__ import annotations

import orjson

from stateway.core.inference import InferenceRequest
from stateway.core.items import Item, is_screenshot
from stateway.core.logprobs import without_tokens

BYTES_PER_TOKEN = 4
IMAGE_TOKENS = 1600
"""An image's estimated tokens, whatever its bytes: about what Anthropic counts for the
largest image it takes unresized (1.15 megapixels, 750 pixels a token), and more than a
vision model on vLLM counts for a screenshot."""
LOW_DETAIL_IMAGE_TOKENS = 85
"""An image asked for at ``detail: "low"``: what OpenAI counts for one, whatever its
size (the model sees it at 512 by 512 pixels)."""
_IMAGE = "input_image"
_PART_LISTS = ("content", "output")
"""Where an item holds its parts: a message's ``content``, a tool output's ``output``."""


def estimate_tokens(request: InferenceRequest) -> int:
    return estimate_context(request.instructions, request.items, request.tools)


def estimate_context(instructions: str | None, items: list[Item], tools: list[Item]) -> int:
    """The same estimate, of a context not yet made into a request (compaction thresholds,
    ``truncation: "auto"``)."""
    size = len(instructions.encode()) if instructions else 0
    views = [_without_images(without_tokens(item)) for item in items]
    size += len(orjson.dumps([view for view, _ in views]))
    size += len(orjson.dumps(tools))
    image_tokens = sum(tokens for _, tokens in views)
    return max(1, -(-size // BYTES_PER_TOKEN) + image_tokens)


def item_tokens(item: Item) -> int:
    """The estimated tokens of one item (its JSON at the same rate, rounded up, and its
    images)."""
    view, image_tokens = _without_images(without_tokens(item))
    return -(-len(orjson.dumps(view)) // BYTES_PER_TOKEN) + image_tokens


def _without_images(item: Item) -> tuple[Item, int]:
    """``item`` without its image parts (the item itself when it has none, checked without
    copying), and their estimated tokens."""
    output = item.get("output")
    if is_screenshot(output):
        return {**item, "output": {"type": output["type"]}}, image_tokens(output)
    for key in _PART_LISTS:
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        images = [p for p in parts if _is_image(p)]
        if images:
            kept = [p for p in parts if not _is_image(p)]
            return {**item, key: kept}, sum(image_tokens(image) for image in images)
    return item, 0


def _is_image(part: object) -> bool:
    return isinstance(part, dict) and part.get("type") == _IMAGE


def image_tokens(image: Item) -> int:
    """An image's estimated tokens, by its ``detail`` (an ``input_image``, or a Chat
    ``image_url`` object)."""
    return LOW_DETAIL_IMAGE_TOKENS if image.get("detail") == "low" else IMAGE_TOKENS
