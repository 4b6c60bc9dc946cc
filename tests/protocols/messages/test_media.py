"""A document or image the upstream cannot carry, named by its block's path in Anthropic's
words (:mod:`stateway.protocols.messages.media`)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core.errors import InvalidRequest, UncarriedPart, UpstreamRejected
from stateway.core.items import Item
from stateway.protocols.messages.media import refused_block


def refusal(part_type: str, param: str) -> UncarriedPart:
    return UncarriedPart("core words", param=param, part_type=part_type, backend="vllm")


def raw(*content: dict[str, Any]) -> bytes:
    messages = [{"role": "user", "content": "first"}, {"role": "user", "content": list(content)}]
    return orjson.dumps({"model": "m", "max_tokens": 8, "messages": messages})


TEXT = {"type": "text", "text": "see"}


def test_a_document_of_a_message_is_named_by_its_path_and_kind() -> None:
    pdf = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
    notes = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "n"},
    }
    error = refusal("input_file", "input[1].content[1].type")

    named = refused_block(error, raw(TEXT, pdf))
    assert isinstance(named, InvalidRequest)
    assert named.message == (
        "messages.1.content.1.document: This model does not support PDF input: the upstream "
        "API of backend 'vllm' cannot carry it here."
    )
    assert named.param == "messages.1.content.1.document"
    assert named.code == "unsupported_content_type"
    plain = refused_block(error, raw(notes))
    assert plain.message.startswith(
        "messages.1.content.0.document: This model does not support document input"
    )


def test_the_document_named_is_the_one_refused_not_a_text_one_before_it() -> None:
    """A Chat upstream carries a plain-text document as its text: a PDF after one is
    refused as the second ``input_file`` of the decoded items, and named as the second
    document of the request (in a message, or in tool results)."""
    notes = {"type": "document", "source": {"type": "text", "data": "n"}}
    pdf = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
    text_file = {"type": "input_file", "file_data": "data:text/plain;base64,bg=="}
    pdf_file = {"type": "input_file", "file_url": "https://x/a.pdf"}

    items = [user(INPUT_TEXT), user(text_file, INPUT_TEXT, pdf_file)]
    error = refusal("input_file", "input[1].content[2].type")
    named = refused_block(error, raw(notes, TEXT, pdf), items)
    assert named.message.startswith(
        "messages.1.content.2.document: This model does not support PDF input"
    )

    result = {"type": "tool_result", "tool_use_id": "t", "content": [notes, pdf]}
    answer = {"type": "function_call_output", "call_id": "t", "output": [text_file, pdf_file]}
    items = [user(INPUT_TEXT), user(pdf_file), answer]
    error = refusal("input_file", "input[2].output[1].type")
    assert refused_block(error, raw(pdf, result), items).message.startswith(
        "messages.1.content.1.tool_result.content.1.document: This model does not support PDF"
    )


INPUT_TEXT = {"type": "input_text", "text": "see"}


def user(*parts: Item) -> Item:
    return {"type": "message", "role": "user", "content": list(parts)}


def test_a_block_in_a_tool_result_is_named_inside_it() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [TEXT, image]}
    error = refusal("input_image", "input[2].output[1].type")
    named = refused_block(error, raw(image, result))  # not the message's own image
    assert named.message.startswith(
        "messages.1.content.1.tool_result.content.1.image: This model does not support image input"
    )


def test_other_errors_and_blocks_a_thread_holds_are_left_as_they_are() -> None:
    other = InvalidRequest("no", param="input[0].type", code="unsupported_item_type")
    assert refused_block(other, raw(TEXT)) is other
    held = refusal("input_file", "previous_response_id")
    assert refused_block(held, raw(TEXT)) is held
    unknown = refusal("input_audio", "input[1].content[0].type")
    assert refused_block(unknown, raw(TEXT)) is unknown


def test_a_block_not_found_is_named_by_messages_alone() -> None:
    named = refused_block(refusal("input_file", "input[1].content[0].type"), raw(TEXT))
    assert named.message.startswith("messages: This model does not support document input")


def test_an_image_the_model_refused_is_named_wherever_it_is_first() -> None:
    image = {"type": "image", "source": {"type": "url", "url": "https://x/i.png"}}
    result = {"type": "tool_result", "tool_use_id": "t", "content": [TEXT, image]}
    words = "Model server 'vllm' answered 400: m is not a multimodal model"
    refused = UpstreamRejected(words, status=400, code="image_input_unsupported")

    named = refused_block(refused, raw(TEXT, result, image))
    assert named.message == (
        "messages.1.content.1.tool_result.content.1.image: This model does not support image "
        f"input: {words}"
    )
    assert named.code == "image_input_unsupported"
    assert named.param == "messages.1.content.1.tool_result.content.1.image"
    other = UpstreamRejected(words, status=400, code="upstream_rejected")
    assert refused_block(other, raw(result)) is other


def test_text_documents_of_earlier_messages_are_passed_over_too() -> None:
    """Each user message is its own item: the documents carried before the refused one
    are counted across all of them."""
    notes = {"type": "document", "source": {"type": "text", "data": "n"}}
    pdf = {"type": "document", "source": {"type": "url", "url": "https://x/a.pdf"}}
    text_file = {"type": "input_file", "file_data": "data:text/plain;base64,bg=="}
    pdf_file = {"type": "input_file", "file_url": "https://x/a.pdf"}
    messages = [
        {"role": "user", "content": [notes, TEXT]},
        {"role": "user", "content": [notes]},
        {"role": "user", "content": [TEXT, pdf]},
    ]
    request = orjson.dumps({"model": "m", "max_tokens": 8, "messages": messages})
    items = [user(text_file, INPUT_TEXT), user(text_file), user(INPUT_TEXT, pdf_file)]

    named = refused_block(refusal("input_file", "input[2].content[1].type"), request, items)
    assert named.message.startswith(
        "messages.2.content.1.document: This model does not support PDF input"
    )


@pytest.mark.parametrize(
    ("param", "items"),
    [
        ("input[1].type", [user(INPUT_TEXT), user(INPUT_TEXT)]),  # no part named
        ("input[0].content[0].type", []),  # no such item
        ("input[0].content[1].type", [user({"type": "input_file", "file_data": "x"})]),
    ],
)
def test_a_param_naming_no_part_of_the_items_names_the_first_block(
    param: str, items: list[Item]
) -> None:
    notes = {"type": "document", "source": {"type": "text", "data": "n"}}
    named = refused_block(refusal("input_file", param), raw(TEXT, notes, notes), items)
    assert named.param == "messages.1.content.1.document"


def test_an_image_refused_where_the_request_has_none_is_named_by_messages() -> None:
    """An image the gateway's own tools returned (an MCP tool's result) is in no block."""
    words = "Model server 'vllm' answered 400: m is not a multimodal model"
    refused = UpstreamRejected(words, status=400, code="image_input_unsupported")
    named = refused_block(refused, raw(TEXT))
    assert named.message == f"messages: This model does not support image input: {words}"
    assert named.param == "messages"
