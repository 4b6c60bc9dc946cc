"""An Anthropic upstream's answers, as each frontend's SDK receives them (the fake upstream
streams Messages events as Anthropic does)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.messages import REFUSAL_DETAILS
from tests.e2e.configured import RunningGateway, configured_gateway
from tests.e2e.routing import fake_requests

MODEL = "fake-model"
NO_INPUT = {"type": "object", "properties": {}}


@pytest.fixture
def gateway(anthropic_gateway: RunningGateway) -> RunningGateway:
    return anthropic_gateway


def test_a_streamed_call_without_input_has_empty_object_arguments(gateway: RunningGateway) -> None:
    """Anthropic streams a call without input as one empty ``partial_json``: its arguments
    reach Responses and Chat clients as ``{}``, which they can parse, not as ``""``."""
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        prompt = "[[tool:list_all:{}]]"
        tool = {"type": "function", "name": "list_all", "parameters": NO_INPUT}
        events = sdk.responses.create(
            model=MODEL, input=prompt, tools=[tool], store=False, stream=True
        )
        calls = [
            event.item
            for event in events
            if event.type == "response.output_item.done" and event.item.type == "function_call"
        ]
        assert [call.arguments for call in calls] == ["{}"]

        arguments = ""
        for chunk in sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": prompt}],
            tools=[{"type": "function", "function": {"name": "list_all", "parameters": NO_INPUT}}],
            stream=True,
        ):
            for choice in chunk.choices:
                for call in choice.delta.tool_calls or ():
                    arguments += call.function.arguments or "" if call.function else ""
        assert arguments == "{}"


def test_a_chat_tool_loop_with_reasoning_continues(gateway: RunningGateway) -> None:
    """A Chat client cannot send thinking signatures back, and Anthropic refuses thinking
    when the last assistant message calls tools without its thinking: the second request
    of the loop goes without thinking instead of failing."""
    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        messages: list[Any] = [{"role": "user", "content": '[[reason:plan]][[tool:f:{"a":1}]]'}]
        first = sdk.chat.completions.create(
            model=MODEL, messages=messages, tools=[tool], reasoning_effort="low"
        )
        message = first.choices[0].message
        assert message.tool_calls
        messages.append(message.model_dump(exclude_none=True))
        messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": "1"})
        second = sdk.chat.completions.create(
            model=MODEL, messages=messages, tools=[tool], reasoning_effort="low"
        )
        assert second.choices[0].finish_reason == "stop"


def resent(prompt: str, reasoning: dict[str, Any], call: Any) -> list[Any]:
    """A turn sent again whole, as a stateless client sends it: the prompt, the reasoning
    item as the client keeps it, the call, and the call's output."""
    return [
        {"role": "user", "content": prompt},
        reasoning,
        {
            "type": "function_call",
            "call_id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
        },
        {"type": "function_call_output", "call_id": call.call_id, "output": "1"},
    ]


def test_reasoning_sent_back_with_its_seal_alone_reaches_anthropic_signed(
    gateway: RunningGateway,
) -> None:
    """Clients of hosted OpenAI send a reasoning item back with its ``encrypted_content``
    and an empty ``summary``, without the text (the Vercel AI SDK, ``store: false``): the
    seal holds all a hosted model needs. Anthropic checks a signature against its thinking,
    so the gateway's seal over it holds that thinking too, and Anthropic gets it back."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    prompt = '[[reason:plan ahead]] [[tool:f:{"a":1}]] [[echo]]'
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        first = sdk.responses.create(
            model=MODEL,
            input=prompt,
            tools=[tool],  # type: ignore[list-item]
            store=False,
            include=["reasoning.encrypted_content"],
        )
        reasoning, call = first.output
        assert reasoning.type == "reasoning"
        assert call.type == "function_call"
        assert reasoning.encrypted_content
        second = sdk.responses.create(
            model=MODEL,
            input=resent(
                prompt,
                {
                    "type": "reasoning",
                    "id": reasoning.id,
                    "summary": [],
                    "encrypted_content": reasoning.encrypted_content,
                },
                call,
            ),
            tools=[tool],  # type: ignore[list-item]
            store=False,
            include=["reasoning.encrypted_content"],
        )
        assert "reasoning: plan ahead" in second.output_text


def test_reasoning_sent_back_with_its_text_alone_gets_the_stored_signature(
    gateway: RunningGateway,
) -> None:
    """Pydantic AI sends a stored response's reasoning back by its id, with its text and
    ``encrypted_content: null`` (for a model it does not know as OpenAI's), as hosted looks
    the item up by its id: Anthropic gets the thinking again, signed as stored. The same id
    over other text is another item under a reused label, and stays unsigned."""
    tool = {"type": "function", "name": "f", "parameters": {"type": "object"}}
    prompt = '[[reason:plan ahead]] [[tool:f:{"a":1}]] [[echo]]'
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        first = sdk.responses.create(
            model=MODEL,
            input=prompt,
            tools=[tool],  # type: ignore[list-item]
            reasoning={"summary": "auto"},
        )
        reasoning, call = first.output
        assert reasoning.type == "reasoning"
        assert call.type == "function_call"
        for text, seen in (("plan ahead", True), ("other plans", False)):
            second = sdk.responses.create(
                model=MODEL,
                input=resent(
                    prompt,
                    {
                        "type": "reasoning",
                        "id": reasoning.id,
                        "summary": [{"type": "summary_text", "text": text}],
                        "content": [{"type": "reasoning_text", "text": text}],
                        "encrypted_content": None,
                    },
                    call,
                ),
                tools=[tool],  # type: ignore[list-item]
            )
            assert ("reasoning: plan ahead" in second.output_text) is seen
            assert "other plans" not in second.output_text


def test_an_effort_is_asked_at_the_level_anthropic_knows_nearest(
    fake_upstream: str, tmp_path: Path
) -> None:
    """With adaptive thinking, a reasoning effort is Anthropic's ``output_config.effort``:
    its own levels as they are (``max`` too), ``minimal`` as ``low``, and a level it does
    not know (a Chat client's own word) as ``high``, its default; none is refused."""
    backend = {"url": fake_upstream, "api": "anthropic", "thinking": "adaptive"}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        for asked, sent in [("minimal", "low"), ("xhigh", "xhigh"), ("max", "max")]:
            marker = f"effort {asked}"
            sdk.responses.create(
                model=MODEL, input=marker, reasoning={"effort": asked}, store=False
            )
            [request] = fake_requests(fake_upstream, marker)
            assert request["body"]["output_config"] == {"effort": sent}
        marker = "effort ultra"
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": marker}],
            reasoning_effort="ultra",  # type: ignore[arg-type]
        )
        [request] = fake_requests(fake_upstream, marker)
        assert request["body"]["output_config"] == {"effort": "high"}


def test_a_summary_asked_for_asks_anthropic_for_the_thinking_summarized(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Claude models from Opus 4.7 on send thinking blocks without their text unless
    ``thinking.display`` is ``summarized``: a Responses client's ``reasoning.summary`` asks
    for that, and a request without one leaves the model's default."""
    backend = {"url": fake_upstream, "api": "anthropic", "thinking": "adaptive"}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        summarized = sdk.responses.create(
            model=MODEL,
            input="[[reason:plan]] summary-asked",
            reasoning={"effort": "high", "summary": "auto"},
            store=False,
        )
        sdk.responses.create(
            model=MODEL, input="summary-unasked", reasoning={"effort": "high"}, store=False
        )
        [request] = fake_requests(fake_upstream, "summary-asked")
        assert request["body"]["thinking"] == {"type": "adaptive", "display": "summarized"}
        [request] = fake_requests(fake_upstream, "summary-unasked")
        assert request["body"]["thinking"] == {"type": "adaptive"}
        [reasoning] = [item for item in summarized.output if item.type == "reasoning"]
        assert [part.text for part in reasoning.summary] == ["plan"]


def test_no_reasoning_asked_is_thinking_disabled(fake_upstream: str, tmp_path: Path) -> None:
    """A Responses or Chat client's effort ``none`` asks Anthropic for no thinking (newer
    models think when ``thinking`` is left out); a client that asked nothing sends none."""
    backend = {"url": fake_upstream, "api": "anthropic", "thinking": "adaptive"}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        sdk.responses.create(
            model=MODEL, input="[[reason:x]] off-r", reasoning={"effort": "none"}, store=False
        )
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "off-c"}],
            reasoning_effort="none",
        )
        sdk.responses.create(model=MODEL, input="unasked-r", store=False)
        for marker in ("off-r", "off-c"):
            [request] = fake_requests(fake_upstream, marker)
            assert request["body"]["thinking"] == {"type": "disabled"}, marker
            assert "output_config" not in request["body"]
        [request] = fake_requests(fake_upstream, "unasked-r")
        assert "thinking" not in request["body"]


def test_sampling_reaches_anthropic_as_the_backend_says_its_model_takes_it(
    fake_upstream: str, tmp_path: Path
) -> None:
    """A Chat client's ``temperature`` and ``top_p`` together, which Claude models from
    Sonnet 4.5 on refuse, reach a backend of ``sampling = "one"`` as the temperature alone."""
    backend = {"url": fake_upstream, "api": "anthropic", "sampling": "one"}
    with (
        configured_gateway(tmp_path, backend) as gateway,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        sdk.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "sampled-one"}],
            temperature=0.3,
            top_p=0.9,
        )
        [request] = fake_requests(fake_upstream, "sampled-one")
        assert (request["body"]["temperature"], "top_p" in request["body"]) == (0.3, False)


def test_an_image_labelled_as_anthropic_refuses_reaches_it_as_its_bytes_are(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """A Chat client's ``data:image/jpg`` URL (a label browsers write; OpenAI reads the
    image whatever it says) reaches Anthropic, which takes ``image/jpeg`` only, as a JPEG."""
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00").decode()
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        answer = sdk.chat.completions.create(
            model=MODEL,
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "jpg-labelled"},
                        {
                            "type": "image_url",
                            "image_url": {"url": f"data:image/jpg;base64,{jpeg}"},
                        },
                    ],
                }
            ],
        )
        assert answer.choices[0].finish_reason == "stop"
        [request] = fake_requests(fake_upstream, "jpg-labelled")
        [_, image] = request["body"]["messages"][0]["content"]
        assert image["source"] == {"type": "base64", "media_type": "image/jpeg", "data": jpeg}


def test_a_blank_stop_sequence_is_kept_by_the_gateway(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """Anthropic refuses an empty or whitespace-only stop sequence, which Chat clients send
    (``stop: ["\\n"]``): the others go to Anthropic, and the gateway ends the text at a
    blank one itself, streamed or not, as the model's own stop would."""
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        for stream in (False, True):
            marker = f"blank-stop-{stream}"
            chat: Any = [
                {"role": "user", "content": f"{marker} and more"},
                {"role": "assistant", "content": "ok"},
                {"role": "user", "content": "[[echo]]"},
            ]
            if stream:
                with sdk.chat.completions.stream(
                    model=MODEL, messages=chat, stop=["\n", "", "zz"]
                ) as events:
                    completion: Any = events.get_final_completion()
            else:
                completion = sdk.chat.completions.create(
                    model=MODEL, messages=chat, stop=["\n", "", "zz"]
                )
            choice = completion.choices[0]
            assert choice.message.content == f"user: {marker} and more"
            assert choice.finish_reason == "stop"
            [request] = fake_requests(fake_upstream, marker)
            assert request["body"]["stop_sequences"] == ["zz"]


def test_anthropics_own_stop_reasons_reach_each_client(gateway: RunningGateway) -> None:
    """``pause_turn``, ``model_context_window_exceeded`` and ``refusal`` (with its
    ``stop_details``) reach a Messages client as Anthropic sent them, streamed or not; a
    Responses client gets an incomplete response for a pause and a refusal, for the reason
    nearest in its vocabulary (a paused turn as the gateway's own tool loop running out of
    rounds), and a failed one for a window filled, which it has no reason for (refused as a
    context too long, as hosted OpenAI refuses a request whose answer cannot fit); a Chat
    client gets the finish reason nearest in its."""
    cases = [
        ("[[stop:pause_turn]]", "pause_turn", ("incomplete", "max_rounds"), "length"),
        (
            "[[stop:model_context_window_exceeded]]",
            "model_context_window_exceeded",
            ("failed", "context_length_exceeded"),
            "length",
        ),
        ("[[refuse:No.]]", "refusal", ("incomplete", "content_filter"), "content_filter"),
    ]
    with (
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        for prompt, stop_reason, ending, finish in cases:
            asked: Any = {
                "model": MODEL,
                "max_tokens": 100,
                "messages": [{"role": "user", "content": prompt}],
            }
            message = claude.messages.create(**asked)
            with claude.messages.stream(**asked) as stream:
                streamed = stream.get_final_message()
            for answer in (message, streamed):
                assert answer.stop_reason == stop_reason, prompt
                details = answer.stop_details
                if stop_reason == "refusal":
                    assert details is not None
                    assert details.model_dump() == REFUSAL_DETAILS
                else:
                    assert details is None

            response = sdk.responses.create(model=MODEL, input=prompt, store=False)
            why = response.incomplete_details or response.error
            assert why is not None, prompt
            said = getattr(why, "reason", None) or getattr(why, "code", None)
            assert (response.status, said) == ending, prompt

            chat = [{"role": "user", "content": prompt}]
            completion = sdk.chat.completions.create(model=MODEL, messages=chat)  # type: ignore[arg-type]
            assert completion.choices[0].finish_reason == finish


CITED_TEXT = "The grass is green."
CITED_DOCUMENTS: Any = [
    {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": CITED_TEXT},
        "title": "Grass",
        "context": "a trustworthy note",
        "citations": {"enabled": True},
    },
    {
        "type": "document",
        "source": {
            "type": "content",
            "content": [{"type": "text", "text": "Sky: "}, {"type": "text", "text": "blue."}],
        },
        "citations": {"enabled": True},
    },
]


def test_document_citations_reach_a_messages_client_as_anthropic_sent_them(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """A document with ``citations`` enabled reaches Anthropic as the client sent it (its
    ``context``, a custom-content source's blocks); the answer's text blocks come back as
    Anthropic split them, each with its ``citations``, streamed (``citations_delta``) or
    not."""
    with (
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        for stream in (False, True):
            marker = f"colors-{stream}?"
            content = [*CITED_DOCUMENTS, {"type": "text", "text": marker}]
            asked: Any = {
                "model": MODEL,
                "max_tokens": 100,
                "messages": [{"role": "user", "content": content}],
            }
            if stream:
                with claude.messages.stream(**asked) as events:
                    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
                    message = events.get_final_message()
                assert deltas.count("citations_delta") == 2
            else:
                message = claude.messages.create(**asked)
            [request] = fake_requests(fake_upstream, marker)
            assert request["body"]["messages"][0]["content"][:2] == CITED_DOCUMENTS

            answer, grass, sky = message.content
            assert answer.type == grass.type == sky.type == "text"
            assert answer.citations is None
            assert grass.text == CITED_TEXT
            assert [c.model_dump(exclude_none=True) for c in grass.citations or ()] == [
                {
                    "type": "char_location",
                    "cited_text": CITED_TEXT,
                    "document_index": 0,
                    "document_title": "Grass",
                    "start_char_index": 0,
                    "end_char_index": len(CITED_TEXT),
                }
            ]
            [cited] = sky.citations or ()
            assert cited.type == "content_block_location"
            assert (cited.start_block_index, cited.end_block_index) == (0, 2)
            assert sky.text == "Sky: blue."


def test_a_responses_client_gets_anthropics_citations_on_the_text_part(
    gateway: RunningGateway,
) -> None:
    """An ``input_file`` carrying Anthropic's ``citations`` field is cited likewise: each
    cited block a message of its own, its ``output_text`` keeping the citations as
    Anthropic gave them, its ``annotations`` empty (a Responses annotation names a file id
    or URL, which the document has not)."""
    data = base64.b64encode(CITED_TEXT.encode()).decode()
    document = {
        "type": "input_file",
        "file_data": f"data:text/plain;base64,{data}",
        "filename": "Grass",
        "citations": {"enabled": True},
    }
    question = {"type": "input_text", "text": "grass?"}
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        response = sdk.responses.create(
            model=MODEL, input=[{"role": "user", "content": [document, question]}]
        )
        answer, cited = (item.model_dump() for item in response.output)
        assert "citations" not in answer["content"][0]
        [part] = cited["content"]
        assert (part["text"], part["annotations"]) == (CITED_TEXT, [])
        [citation] = part["citations"]
        assert citation["type"] == "char_location"
        assert citation["document_title"] == "Grass"


HIT: Any = {
    "type": "search_result",
    "source": "https://a.test/",
    "title": "A",
    "content": [{"type": "text", "text": "About a."}],
    "citations": {"enabled": True},
}


def test_a_cited_answer_sent_back_reaches_anthropic_with_its_citations(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """A Messages client's next turn sends Anthropic's cited text blocks back: they reach
    Anthropic as they were, citations included, beside the documents and the client's
    own ``search_result`` block they came with."""
    with (
        Anthropic(base_url=gateway.url, api_key="k", max_retries=0) as claude,
    ):
        asked: Any = [
            {"role": "user", "content": [*CITED_DOCUMENTS, HIT, {"type": "text", "text": "q?"}]}
        ]
        first = claude.messages.create(model=MODEL, max_tokens=100, messages=asked)
        answer = [block.model_dump(exclude_none=True) for block in first.content]
        assert [bool(block.get("citations")) for block in answer] == [False, True, True]
        again = [
            *asked,
            {"role": "assistant", "content": answer},
            {"role": "user", "content": "and then-sent-back?"},
        ]
        claude.messages.create(model=MODEL, max_tokens=100, messages=again)
        [request] = fake_requests(fake_upstream, "then-sent-back")
        sent = request["body"]["messages"]
        assert sent[0]["content"][2] == HIT
        assert [block.get("citations") for block in sent[1]["content"]] == [
            block.get("citations") for block in answer
        ]


def test_a_responses_chain_sends_anthropics_citations_back(
    gateway: RunningGateway, fake_upstream: str
) -> None:
    """The cited parts of a stored answer go back to Anthropic as cited text blocks."""
    data = base64.b64encode(CITED_TEXT.encode()).decode()
    document = {
        "type": "input_file",
        "file_data": f"data:text/plain;base64,{data}",
        "filename": "Grass",
        "citations": {"enabled": True},
    }
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        first = sdk.responses.create(
            model=MODEL,
            input=[{"role": "user", "content": [document, {"type": "input_text", "text": "?"}]}],
        )
        sdk.responses.create(model=MODEL, input="chained-citations?", previous_response_id=first.id)
        [request] = fake_requests(fake_upstream, "chained-citations")
        cited = [b for b in request["body"]["messages"][1]["content"] if "citations" in b]
        assert [(b["text"], b["citations"][0]["type"]) for b in cited] == [
            (CITED_TEXT, "char_location")
        ]


@pytest.mark.parametrize("failure", ["[[fail:2]]", "[[cut:2]]"], ids=["error-event", "cut"])
def test_a_response_failed_after_anthropic_counted_its_prompt_reports_that_count(
    gateway: RunningGateway, failure: str
) -> None:
    """``message_start`` counts the prompt, which Anthropic bills whatever follows: a
    response failed part-way (an ``error`` event, the connection dropped) reports those
    input tokens, streamed and stored; the answer's output, never counted, is not."""
    prompt = f"[[words:8]] {failure} [[only:failing-model]] counted-then-failed"
    with (
        OpenAI(base_url=gateway.url + "/v1", api_key="k", max_retries=0) as sdk,
    ):
        whole = sdk.responses.create(model=MODEL, input=prompt)  # the same prompt, answered
        assert whole.usage is not None
        events = list(sdk.responses.create(model="failing-model", input=prompt, stream=True))
        failed = events[-1]
        assert failed.type == "response.failed"
        assert failed.response.usage is not None
        counted = (failed.response.usage.input_tokens, failed.response.usage.output_tokens)
        assert counted == (whole.usage.input_tokens, 0)
        stored = sdk.responses.retrieve(failed.response.id).usage
        assert stored is not None
        assert stored.input_tokens == whole.usage.input_tokens
