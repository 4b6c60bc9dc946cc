"""A model declining to answer (``[[refuse:TEXT]]``: the fake answers with Chat's
``refusal``, or a Responses ``refusal`` part) reaches each client as its API shows a
refusal, through the official SDKs, over Chat Completions and Responses upstreams:
Responses, a ``refusal`` content part (``response.refusal.delta``/``.done`` streamed);
Chat Completions, ``message.refusal`` (``delta.refusal``); Messages, the text with
``stop_reason: "refusal"``."""

from __future__ import annotations

import anthropic
import pydantic
from openai import OpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionMessage
from openai.types.responses import ResponseOutputMessage, ResponseOutputRefusal

MODEL = "fake-model"
DECLINED = "I can't help with that."
REFUSE = f"[[refuse:{DECLINED}]]"


def _refusal(output: list[object]) -> str:
    [message] = output
    assert isinstance(message, ResponseOutputMessage)
    [part] = message.content
    assert isinstance(part, ResponseOutputRefusal)
    return part.refusal


def test_a_refusal_is_a_refusal_part_streamed_and_stored(client: OpenAI) -> None:
    answered = client.responses.create(model=MODEL, input=REFUSE)
    assert answered.status == "completed"
    assert _refusal(answered.output) == DECLINED
    assert answered.output_text == ""

    with client.responses.stream(model=MODEL, input=REFUSE) as stream:
        events = list(stream)
        final = stream.get_final_response()
    deltas = [e.delta for e in events if e.type == "response.refusal.delta"]
    assert "".join(deltas) == DECLINED
    [done] = [e for e in events if e.type == "response.refusal.done"]
    assert done.refusal == DECLINED
    added = [e.part.type for e in events if e.type == "response.content_part.added"]
    assert added == ["refusal"], "no empty text part beside the refusal"
    assert _refusal(final.output) == DECLINED
    assert client.responses.retrieve(final.id).model_dump() == final.model_dump()


def test_parse_gets_no_parsed_output_and_the_next_turn_sees_the_refusal(
    client: OpenAI,
) -> None:
    class Answer(pydantic.BaseModel):
        text: str

    parsed = client.responses.parse(model=MODEL, input=REFUSE, text_format=Answer)
    assert parsed.output_parsed is None
    assert _refusal(parsed.output) == DECLINED

    echoed = client.responses.create(model=MODEL, input="[[echo]]", previous_response_id=parsed.id)
    assert f"assistant: {DECLINED}" in echoed.output_text.splitlines()


def _streamed(client: OpenAI, content: str) -> ChatCompletionMessage:
    """The message the SDK accumulates from the stream's chunks."""
    messages = [{"role": "user", "content": content}]
    chunks = client.chat.completions.create(model=MODEL, messages=messages, stream=True)  # type: ignore[arg-type]
    state: ChatCompletionStreamState[None] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    return state.get_final_completion().choices[0].message


def test_chat_completions_answer_with_message_refusal(client: OpenAI) -> None:
    """As hosted: ``content`` null beside a refusal, ``refusal`` null beside text, streamed
    (the SDK's accumulated message) as not."""
    messages = [{"role": "user", "content": REFUSE}]
    completion = client.chat.completions.create(model=MODEL, messages=messages)  # type: ignore[arg-type]
    message = completion.choices[0].message
    assert (message.refusal, message.content) == (DECLINED, None)
    streamed = _streamed(client, REFUSE)
    assert (streamed.refusal, streamed.content) == (DECLINED, None)

    answered = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "hi"}],
    )
    assert (answered.choices[0].message.refusal, answered.choices[0].message.content) == (
        None,
        "Hello! You said: hi",
    )
    streamed = _streamed(client, "hi")
    assert (streamed.refusal, streamed.content) == (None, "Hello! You said: hi")


def test_messages_answer_with_the_refusal_stop_reason(client: OpenAI) -> None:
    base_url = str(client.base_url).removesuffix("/v1/")
    with anthropic.Anthropic(base_url=base_url, api_key="sk-test", max_retries=0) as claude:
        asked = {
            "model": MODEL,
            "max_tokens": 100,
            "messages": [{"role": "user", "content": REFUSE}],
        }
        message = claude.messages.create(**asked)  # type: ignore[call-overload]
        with claude.messages.stream(**asked) as stream:  # type: ignore[arg-type]
            streamed = stream.get_final_message()
    for answer in (message, streamed):
        assert answer.stop_reason == "refusal"
        assert [block.type for block in answer.content] == ["text"]
        assert answer.content[0].text == DECLINED  # type: ignore[union-attr]
