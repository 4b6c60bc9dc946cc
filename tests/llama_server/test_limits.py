"""What a real llama-server refuses or does its own way, through the gateway: an image
its model cannot see, and an assistant message to continue (Messages' prefill)."""

from __future__ import annotations

import base64
from typing import Any

import anthropic
import openai
import pytest
from anthropic import Anthropic
from anthropic.types import Message
from openai import OpenAI

from tests.llama_server.server import MODEL
from tests.llama_server.tiny_model import REPLY_TEXT

pytestmark = pytest.mark.llama_server

PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c63000100000500010d0a2db40000000049454e44ae426082"
    )
).decode()


def test_an_image_the_model_cannot_see_is_image_input_unsupported(client: OpenAI) -> None:
    """llama-server without a projector (``--mmproj``) refuses an image with a 500
    (``server_error``): its words say what it is, a refusal of the request (400), which
    another candidate may serve, not a failing server."""
    image = {"type": "input_image", "image_url": f"data:image/png;base64,{PNG}"}
    content = [{"type": "input_text", "text": "What is it?"}, image]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=[{"role": "user", "content": content}])  # type: ignore[list-item]
    assert refused.value.code == "image_input_unsupported"
    assert "image input is not supported" in refused.value.message


def test_a_messages_client_is_told_which_image_to_leave_out(claude: Anthropic) -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}
    content = [{"type": "text", "text": "What is it?"}, image]
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(
            model=MODEL,
            max_tokens=100,
            messages=[{"role": "user", "content": content}],  # type: ignore[list-item]
        )
    message = refused.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages.0.content.1.image: This model does not support image")


@pytest.mark.parametrize("stream", [False, True])
def test_a_prefill_is_continued_and_not_repeated(claude: Anthropic, stream: bool) -> None:
    """llama-server's whole answer to a continued message holds the message from its
    start, the prefill first; its stream holds only what follows, as Anthropic answers."""
    prefilled = [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>"},  # whitespace last is refused
    ]
    message = _answer(claude, stream, model=MODEL, max_tokens=100, messages=prefilled)
    assert [(block.type, getattr(block, "text", None)) for block in message.content] == [
        ("text", REPLY_TEXT.removeprefix("<think>"))  # a continuation is text: no reasoning
    ]


def _answer(claude: Anthropic, stream: bool, **request: Any) -> Message:
    if stream:
        with claude.messages.stream(**request) as streamed:
            return streamed.get_final_message()
    return claude.messages.create(**request)
