"""The ``media_type`` of a base64 image sent to an Anthropic upstream.

Anthropic takes four (``image/jpeg``, ``image/png``, ``image/gif``, ``image/webp``) and
refuses an image whose bytes are not of the type named ("Image does not match the provided
media type"). OpenAI's APIs read an image whatever its data URL says, and clients label
them loosely: browsers, pasteboards and many tools write ``image/jpg``, and a screenshot
saved as ``.png`` may hold a JPEG. So the type sent is the one the image's first bytes
show; bytes of no type known here go with the label, lower-cased, ``image/jpg`` (and
``image/pjpeg``) as ``image/jpeg``: another label (``image/heic``, ``image/svg+xml``) is
left to Anthropic's refusal, which names it.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

_SIGNATURES: Final = (
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)
"""The leading bytes of each type Anthropic takes (WebP's are apart: RIFF, then WEBP)."""
_ALIASES: Final = {"image/jpg": "image/jpeg", "image/pjpeg": "image/jpeg"}
_HEAD: Final = 16
"""Base64 characters read: 12 bytes, past WebP's ``RIFF....WEBP``."""


def image_media_type(declared: str, data: str) -> str:
    """The media type of the base64 ``data`` a data URL labelled ``declared``."""
    head = _head(data)
    for signature, media_type in _SIGNATURES:
        if head.startswith(signature):
            return media_type
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    label = declared.strip().lower()
    return _ALIASES.get(label, label)


def _head(data: str) -> bytes:
    try:
        return base64.b64decode(data[:_HEAD], validate=False)
    except (binascii.Error, ValueError):
        return b""
