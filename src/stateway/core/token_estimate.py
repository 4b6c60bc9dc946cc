"""A rough count of a request's input tokens, for upstreams that cannot count them.

About four bytes of JSON per token (the rule of thumb for English text and code under
BPE tokenizers): the instructions, every item of the context and the offered tools,
serialized as the gateway holds them (less the output tokens stored with earlier
answers, which the model is not sent: :mod:`stateway.core.logprobs`), but for images,
which count :data:`IMAGE_TOKENS` each (:data:`LOW_DETAIL_IMAGE_TOKENS` at ``detail:
"low"``): their base64 data is no text the model reads, and at four bytes a token a
screenshot would count as a long book. A file sent inline counts what it holds, not its
base64 either: a PDF :data:`PDF_PAGE_TOKENS` a page, another file its decoded bytes at the
same rate. Good enough to size a context, not to bill. It
also decides ``context_management`` thresholds and ``truncation: "auto"``
(:mod:`stateway.core.compaction`).
"""

from __future__ import annotations

import base64
import binascii
import re

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
PDF_PAGE_TOKENS = 3100
"""A PDF page's estimated tokens: the low end of what Anthropic counts for a page's text
(1,500) and its image (:data:`IMAGE_TOKENS`); Anthropic and OpenAI both show the model each
page's text and picture."""
_IMAGE = "input_image"
_FILE = "input_file"
_DATA_URL = re.compile(r"data:([^;,]*)(?:;[^,]*)?;base64,", re.ASCII)
_PDF_PAGE = re.compile(rb"/Type\s*/Page(?![A-Za-z])")
"""A page object (not the ``/Pages`` tree), visible unless object streams compress it."""
_PART_LISTS = ("content", "output")
"""Where an item holds its parts: a message's ``content``, a tool output's ``output``."""


def estimate_tokens(request: InferenceRequest) -> int:
    return estimate_context(request.instructions, request.items, request.tools)


def estimate_context(instructions: str | None, items: list[Item], tools: list[Item]) -> int:
    """The same estimate, of a context not yet made into a request (compaction thresholds,
    ``truncation: "auto"``)."""
    size = len(instructions.encode()) if instructions else 0
    views = [_without_media(without_tokens(item)) for item in items]
    size += len(orjson.dumps([view for view, _ in views]))
    size += len(orjson.dumps(tools))
    image_tokens = sum(tokens for _, tokens in views)
    return max(1, -(-size // BYTES_PER_TOKEN) + image_tokens)


def item_tokens(item: Item) -> int:
    """The estimated tokens of one item (its JSON at the same rate, rounded up, and its
    images)."""
    view, image_tokens = _without_media(without_tokens(item))
    return -(-len(orjson.dumps(view)) // BYTES_PER_TOKEN) + image_tokens


def _without_media(item: Item) -> tuple[Item, int]:
    """``item`` without its image parts and inline files (the item itself when it has
    none, checked without copying), and their estimated tokens."""
    output = item.get("output")
    if is_screenshot(output):
        return {**item, "output": {"type": output["type"]}}, image_tokens(output)
    for key in _PART_LISTS:
        parts = item.get(key)
        if not isinstance(parts, list):
            continue
        media = [p for p in parts if _is_media(p)]
        if media:
            kept = [p for p in parts if not _is_media(p)]
            return {**item, key: kept}, sum(_media_tokens(part) for part in media)
    return item, 0


def _is_media(part: object) -> bool:
    """An image, or a file sent inline (one named by id or URL counts as its JSON)."""
    if not isinstance(part, dict):
        return False
    kind = part.get("type")
    data = part.get("file_data")
    return kind == _IMAGE or (
        kind == _FILE and isinstance(data, str) and _DATA_URL.match(data) is not None
    )


def _media_tokens(part: Item) -> int:
    if part.get("type") == _FILE:
        return file_tokens(part.get("file_data"))
    return image_tokens(part)


def file_tokens(file_data: object) -> int:
    """An inline file's estimated tokens, by what its ``data:`` URL holds: a PDF's pages (its
    bytes, when object streams hide them), another file's bytes; 0 for no inline file."""
    inline = _inline(file_data)
    if inline is None:
        return 0
    media_type, data = inline
    pages = len(_PDF_PAGE.findall(data)) if media_type == "application/pdf" else 0
    return pages * PDF_PAGE_TOKENS or -(-len(data) // BYTES_PER_TOKEN)


def _inline(file_data: object) -> tuple[str, bytes] | None:
    """The media type and decoded bytes of a base64 ``data:`` URL (its base64 length's worth
    when it does not decode)."""
    if not isinstance(file_data, str) or (head := _DATA_URL.match(file_data)) is None:
        return None
    encoded = file_data[head.end() :]
    try:
        data = base64.b64decode(encoded)
    except (binascii.Error, ValueError):
        data = bytes(len(encoded) * 3 // 4)
    return head.group(1).lower(), data


def image_tokens(image: Item) -> int:
    """An image's estimated tokens, by its ``detail`` (an ``input_image``, or a Chat
    ``image_url`` object)."""
    return LOW_DETAIL_IMAGE_TOKENS if image.get("detail") == "low" else IMAGE_TOKENS
