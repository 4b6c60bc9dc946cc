"""A document or image the model server cannot take, refused as Anthropic refuses a block
its model cannot read: ``messages.N.content.M.document: This model does not support PDF
input ...`` (in a tool result: ``messages.N.content.M.tool_result.content.K.document``).

The core refuses a content part the backend's upstream API cannot carry
(:class:`~stateway.core.errors.UncarriedPart`: a Chat Completions upstream takes no
documents but plain-text ones, :mod:`stateway.core.text_files`) naming it by its place
among the canonical items, which a Messages client never saw; a model server that takes
no images refuses one without saying which (``image_input_unsupported``:
:mod:`stateway.backends.upstream_status`), and the first image of the request is named.
Claude Code reads this wording: on a 400 that names a ``document`` or ``image`` block by
its path, or says that the model ``does not support PDF input``, it leaves the block out,
tells the model and the user so, and sends the request again; any other wording ends the
turn, and the block, still in the conversation, fails every later request (its Read of a
PDF, or of a screenshot on a text-only model, would end the session). The block named is
the one refused, among the blocks of its kind where the core found it (a tool result's
content, or a message's): past as many as there are parts of its type before it in the
decoded items, which the upstream carried (a plain-text document before a PDF); a block of
an earlier message the thread holds is named by no path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from stateway.core.errors import (
    IMAGE_INPUT_UNSUPPORTED,
    GatewayError,
    InvalidRequest,
    UncarriedPart,
    UpstreamRejected,
)
from stateway.core.items import Item
from stateway.protocols.messages.sent_blocks import sent_blocks

_BLOCKS: Final = {"input_file": "document", "input_image": "image"}
"""The canonical part type -> the Messages block it came from."""
_PART: Final = re.compile(r"input\[(\d+)\]\.(content|output)\[(\d+)\]")
"""A part of an input item, as the core names it."""


def refused_block(error: GatewayError, raw: bytes, items: Sequence[Item] = ()) -> GatewayError:
    """``error`` for the Messages request ``raw``, decoded as ``items``: a document or image
    of the request that the upstream cannot carry, or an image its model refused, is named
    by its block's path, in Anthropic's words; any other error is left as it is."""
    if isinstance(error, UpstreamRejected) and error.code == IMAGE_INPUT_UNSUPPORTED:
        found = _first_block(raw, "image", in_tool_result=None)
        path = found[0] if found is not None else "messages"
        return InvalidRequest(
            f"{path}: This model does not support image input: {error.message}",
            param=path,
            code=IMAGE_INPUT_UNSUPPORTED,
        )
    if not isinstance(error, UncarriedPart) or error.part_type not in _BLOCKS:
        return error
    param = error.param or ""
    if not param.startswith("input["):  # held by the thread, not in this request
        return error
    kind = _BLOCKS[error.part_type]
    skipped = _carried_before(items, param, error.part_type)
    found = _first_block(raw, kind, in_tool_result=".output[" in param, skip=skipped)
    path, block = found if found is not None else ("messages", {})
    what = _input_named(kind, block)
    return InvalidRequest(
        f"{path}: This model does not support {what} input: the upstream API of backend "
        f"'{error.backend}' cannot carry it here.",
        param=path,
        code=error.code,
    )


def _input_named(kind: str, block: dict[str, Any]) -> str:
    """``PDF`` for a PDF document (by its media type, or a URL: Anthropic's URL documents
    are PDFs), else the block's kind."""
    if kind == "image":
        return "image"
    source = block.get("source")
    if isinstance(source, dict) and (
        source.get("media_type") == "application/pdf" or source.get("type") == "url"
    ):
        return "PDF"
    return "document"


def _carried_before(items: Sequence[Item], param: str, part_type: str) -> int:
    """How many parts of ``part_type`` come before the one ``param`` names
    (``input[i].content[j]``, or ``.output[j]`` in a tool output) among the parts of its
    kind (messages', or tool outputs'): the upstream carried them (a plain-text document,
    as its text), and the blocks they came from are not the one to name. 0 when ``param``
    names no such part of ``items``."""
    found = _PART.match(param)
    if found is None:
        return 0
    index, where, position = int(found[1]), found[2], int(found[3])
    refused = items[index].get(where) if index < len(items) else None
    if not isinstance(refused, list) or position >= len(refused):
        return 0
    before = 0
    for item in items[:index]:
        parts = item.get(where)
        before += sum(_is(part, part_type) for part in parts) if isinstance(parts, list) else 0
    return before + sum(_is(part, part_type) for part in refused[:position])


def _is(part: object, part_type: str) -> bool:
    return isinstance(part, dict) and part.get("type") == part_type


def _first_block(
    raw: bytes, kind: str, *, in_tool_result: bool | None, skip: int = 0
) -> tuple[str, dict[str, Any]] | None:
    """The path and body of the first ``kind`` block of a user message of ``raw``, or of a
    ``tool_result``'s content (``in_tool_result`` None: either, whichever comes first),
    after the ``skip`` before it."""
    for n, m, block in sent_blocks(raw):
        if not in_tool_result and block.get("type") == kind:
            if skip == 0:
                return f"messages.{n}.content.{m}.{kind}", block
            skip -= 1
        inner = block.get("content") if block.get("type") == "tool_result" else None
        searched = inner if in_tool_result is not False and isinstance(inner, list) else ()
        for k, part in enumerate(searched):
            if isinstance(part, dict) and part.get("type") == kind:
                if skip == 0:
                    return f"messages.{n}.content.{m}.tool_result.content.{k}.{kind}", part
                skip -= 1
    return None
