"""Text files: an ``input_file`` part that holds text, which an upstream taking no files is
given as that text.

Hosted Anthropic reads a plain-text document on every model, and hosted OpenAI a text
file; a Chat Completions server (vLLM, llama.cpp) takes no file at all. A file is text
when it is sent inline, its ``file_data`` a base64 ``data:`` URL of a text media type
(``text/*``, ``application/json`` or ``application/xml``; a ``charset``, if named, UTF-8 or
US-ASCII), and its bytes decode as UTF-8 (a leading byte order mark left out). A PDF,
an image sent as a file, a file named by ``file_url`` or ``file_id``, and bytes that are
not UTF-8 are not: such a part stays refused by a backend that takes no files.

:func:`file_text` is the one judge: the pre-flight check counts a text file as carried
by a backend that ``inlines_text_files`` (:func:`stateway.core.context.uncarried`), and
that backend's encoder sends the text :func:`inlined_text` lays out; an Anthropic
upstream gets a text file as a ``text`` document (its base64 documents are PDFs only).
That layout is the one a Messages ``search_result`` reaches such an upstream in (its
title, its source, its text): one line each for the file's name (a Messages document's
title) and a Messages document's ``context``, when given, then the text.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final

from stateway.core.items import Item

INPUT_FILE: Final = "input_file"
_TEXT_TYPES: Final = frozenset({"application/json", "application/xml"})
"""Text media types beyond ``text/*``: the structured ones a client names a JSON or XML file
by; any other ``application/*`` type (``octet-stream``, ``pdf``, ...) may be anything."""
_CHARSETS: Final = frozenset({"utf-8", "utf8", "us-ascii"})
"""The charsets a text file may name: its bytes are read as UTF-8."""


def inlined_text(part: Item) -> str | None:
    """The text ``part`` is given to an upstream that takes no files as: its filename and
    context, if any, then its text, one a line; None when it is no text file."""
    text = file_text(part)
    if text is None:
        return None
    lines = [part.get("filename"), part.get("context"), text]
    return "\n".join(line for line in lines if isinstance(line, str) and line)


def file_text(part: Item) -> str | None:
    """The decoded text of an ``input_file`` sent inline as a text file, else None (an
    Anthropic upstream is sent it as a ``text`` document: its base64 ones are PDFs)."""
    data = part.get("file_data")
    if part.get("type") != INPUT_FILE or not isinstance(data, str) or not data.startswith("data:"):
        return None
    head, comma, payload = data[5:].partition(",")
    media_type, *parameters = (p.strip().lower() for p in head.split(";"))
    if not comma or not parameters or parameters[-1] != "base64" or not _is_text(media_type):
        return None
    for parameter in parameters[:-1]:
        name, _, value = parameter.partition("=")
        if name.strip() == "charset" and value.strip().strip('"') not in _CHARSETS:
            return None
    try:  # base64 wrapped in lines, as some encoders write it, is still base64
        decoded = base64.b64decode("".join(payload.split()), validate=True)
        return decoded.decode("utf-8-sig")  # a byte order mark is no part of the text
    except (binascii.Error, UnicodeDecodeError):
        return None


def _is_text(media_type: str) -> bool:
    return media_type.startswith("text/") or media_type in _TEXT_TYPES
