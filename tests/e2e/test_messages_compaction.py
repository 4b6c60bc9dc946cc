"""Anthropic's server-side compaction on ``/v1/messages``, end to end: the real ``stateway
serve`` in front of the real fake upstream speaking each upstream shape, driven by the
official ``anthropic`` SDK (its beta ``compaction`` parameter, ``compaction`` blocks, and
the error classes it picks by ``error.details.error_code``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from anthropic.types import (
    CompactionBlockAmbiguousError,
    CompactionBlockMisplacedError,
    CompactionContentMismatchError,
    CompactionIncompleteTurnError,
    CompactionNothingToSummarizeError,
    CompactionSignatureInvalidError,
)

from stateway.core.compaction.prompt import STANDALONE_SUMMARY_PROMPT, SUMMARY_PREFIX
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.fake_upstream.plan import SUMMARY_HEADING
from stateway.launch import start_gateway
from tests.e2e.authenticated import auth_gateway, create_key
from tests.e2e.test_messages_sdk import clear, upstream_log
from tests.support.sealing import readable_in

MODEL = "fake-model"
HISTORY: list[Any] = [
    {"role": "user", "content": "my name is Ada"},
    {"role": "assistant", "content": "Nice to meet you, Ada."},
    {"role": "user", "content": "I like tea"},
]
SUMMARIZE: Any = {"type": "summarize"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "responses", "anthropic"])
def gateway(
    request: pytest.FixtureRequest, upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", upstream, "--upstream-api", request.param, "--database", database]
    with start_gateway(args) as url:
        yield url


def create(claude: Anthropic, messages: list[Any], **kwargs: Any) -> Any:
    return claude.beta.messages.create(model=MODEL, max_tokens=1000, messages=messages, **kwargs)


def streamed(claude: Anthropic, messages: list[Any], **kwargs: Any) -> Any:
    with claude.beta.messages.stream(
        model=MODEL, max_tokens=1000, messages=messages, **kwargs
    ) as stream:
        events = [event.type for event in stream]
        message = stream.get_final_message()
    assert "compaction" not in events or events.count("compaction") == 1
    return message


SEND = [create, streamed]


def user_texts(body: dict[str, Any]) -> list[str]:
    """The text of every user message an upstream got, in order, whatever its wire."""
    texts: list[str] = []
    for message in body.get("messages") or body.get("input") or []:
        if message.get("role") != "user":
            continue
        content = message.get("content")
        parts = [{"text": content}] if isinstance(content, str) else content or []
        texts += [part["text"] for part in parts if "text" in part]
    return texts


def block_of(message: Any) -> dict[str, Any]:
    assert message.stop_reason == "compaction"
    [block] = message.content
    assert block.type == "compaction"
    dumped: dict[str, Any] = block.model_dump(exclude_none=True)
    return dumped


def compacted(claude: Anthropic, **kwargs: Any) -> dict[str, Any]:
    return block_of(create(claude, HISTORY, compaction=SUMMARIZE, **kwargs))


@pytest.mark.parametrize("send", SEND)
def test_a_compaction_request_answers_with_one_signed_block(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    clear(upstream)
    message = send(claude, HISTORY, compaction=SUMMARIZE)
    block = block_of(message)
    assert set(block) == {"type", "content", "signature"}
    assert block["content"].splitlines() == [
        SUMMARY_HEADING,
        "user: my name is Ada",
        "assistant: Nice to meet you, Ada.",
        "user: I like tea",
    ]
    assert block["signature"].startswith("sw1.")
    assert readable_in(block["signature"], "my name is Ada", "Nice to meet you, Ada") == []
    usage = message.usage  # the summarizing call's is its iteration, as Anthropic counts it
    assert (usage.input_tokens, usage.output_tokens) == (0, 0)
    [iteration] = usage.iterations or []
    assert iteration.type == "compaction"
    assert iteration.input_tokens > 0
    assert iteration.output_tokens > 0
    [sent] = upstream_log(upstream)  # one summarizing call, nothing sampled after it
    texts = user_texts(sent["body"])
    assert texts[-1] == STANDALONE_SUMMARY_PROMPT


@pytest.mark.parametrize("send", SEND)
def test_instructions_replace_the_prompt(claude: Anthropic, upstream: str, send: Any) -> None:
    clear(upstream)
    config = {"type": "summarize", "instructions": "[[echo]] in one line"}
    block = block_of(send(claude, HISTORY, compaction=config))
    # (an Anthropic upstream's fake reads the two user turns it got merged as one line)
    assert block["content"].splitlines()[-1].endswith("[[echo]] in one line")
    [sent] = upstream_log(upstream)
    assert user_texts(sent["body"])[-1] == "[[echo]] in one line"
    blank = block_of(send(claude, HISTORY, compaction={**config, "instructions": "  \n"}))
    assert blank["content"].startswith(SUMMARY_HEADING)


@pytest.mark.parametrize("send", SEND)
def test_the_block_sent_back_first_stands_for_the_conversation(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    block = compacted(claude)
    clear(upstream)
    later = [{"role": "assistant", "content": [block]}, {"role": "user", "content": "[[echo]]"}]
    answer = send(claude, later, system="be brief")
    assert answer.stop_reason == "end_turn"
    [text] = [b.text for b in answer.content if b.type == "text"]
    assert SUMMARY_PREFIX + SUMMARY_HEADING in text
    [sent] = upstream_log(upstream)
    # the upstream gets the summary where the block stood, not the messages it summarized
    assert user_texts(sent["body"]) == [SUMMARY_PREFIX + block["content"], "[[echo]]"]
    # first in a user message, before the new turn's text, it stands there too
    clear(upstream)
    send(claude, [{"role": "user", "content": [block, {"type": "text", "text": "go on"}]}])
    [sent] = upstream_log(upstream)
    assert user_texts(sent["body"]) == [SUMMARY_PREFIX + block["content"], "go on"]


def test_a_block_is_compacted_again_with_what_followed(claude: Anthropic) -> None:
    block = compacted(claude)
    messages = [
        {"role": "user", "content": [block, {"type": "text", "text": "and coffee"}]},
        {"role": "assistant", "content": "Noted."},
    ]
    again = block_of(create(claude, messages, compaction=SUMMARIZE))
    assert "assistant: Noted." in again["content"]
    assert SUMMARY_PREFIX.strip() in again["content"]


def test_a_block_without_content_is_a_no_op(claude: Anthropic) -> None:
    failed = {"type": "compaction", "content": None}
    messages = [{"role": "user", "content": [failed, {"type": "text", "text": "hi there"}]}]
    answer = create(claude, messages)
    assert answer.content[0].text == "Hello! You said: hi there"


def test_count_tokens_ignores_the_parameter_and_counts_the_summary(claude: Anthropic) -> None:
    counted = claude.beta.messages.count_tokens(model=MODEL, messages=HISTORY, compaction=SUMMARIZE)
    assert counted.input_tokens > 0
    block = compacted(claude)
    later = [{"role": "user", "content": [block, {"type": "text", "text": "go on"}]}]
    assert claude.beta.messages.count_tokens(model=MODEL, messages=later).input_tokens > 0


def test_compaction_errors_raise_their_sdk_classes(claude: Anthropic) -> None:
    block = compacted(claude)
    text = {"type": "text", "text": "go on"}
    cases: list[tuple[type[anthropic.APIStatusError], list[Any], dict[str, Any]]] = [
        (
            CompactionBlockMisplacedError,
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [block]}],
            {},
        ),
        (
            CompactionBlockMisplacedError,
            [{"role": "user", "content": [text, block]}],
            {},
        ),
        (
            CompactionBlockMisplacedError,
            [{"role": "system", "content": [block]}, {"role": "user", "content": "hi"}],
            {},
        ),
        (
            CompactionBlockAmbiguousError,
            [{"role": "user", "content": [block, block, text]}],
            {},
        ),
        (
            CompactionContentMismatchError,
            [{"role": "user", "content": [{**block, "content": "my name is Bob"}, text]}],
            {},
        ),
        (
            CompactionSignatureInvalidError,
            [{"role": "user", "content": [{**block, "signature": tampered(block)}, text]}],
            {},
        ),
        (
            CompactionSignatureInvalidError,
            [{"role": "user", "content": [{"type": "compaction", "content": "made up"}, text]}],
            {},
        ),
        (
            CompactionNothingToSummarizeError,
            [{"role": "user", "content": [{"type": "compaction", "content": None}]}],
            {"compaction": SUMMARIZE},
        ),
        (
            CompactionIncompleteTurnError,
            [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {}}],
                },
            ],
            {"compaction": SUMMARIZE},
        ),
    ]
    for error_class, messages, extra in cases:
        with pytest.raises(error_class) as caught:
            create(claude, messages, **extra)
        error = caught.value
        assert error.status_code == 400
        assert error.type == "invalid_request_error"
        assert error.error_code is not None
        assert error.error_code.startswith("compaction_")
        assert error.details is not None
        assert error.details.error_code == error.error_code


def tampered(block: dict[str, Any]) -> str:
    sealed: str = block["signature"]
    middle = len(sealed) // 2
    return sealed[:middle] + ("A" if sealed[middle] != "A" else "B") + sealed[middle + 1 :]


def test_compaction_with_context_management_is_refused(claude: Anthropic) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(
            claude,
            HISTORY,
            compaction=SUMMARIZE,
            context_management={"edits": [{"type": "clear_thinking_20251015"}]},
        )
    assert caught.value.error_code is None
    assert caught.value.api_message.startswith("compaction:")  # type: ignore[union-attr]


def test_another_tenants_block_is_refused(upstream: str, tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'stateway.db'}"
    with auth_gateway(tmp_path, upstream, database) as gateway:
        alice_key, bob_key = create_key(database, "alice"), create_key(database, "bob")
        with (
            Anthropic(base_url=gateway.url, api_key=alice_key, max_retries=0) as alice,
            Anthropic(base_url=gateway.url, api_key=bob_key, max_retries=0) as bob,
        ):
            block = compacted(alice)
            later = [{"role": "user", "content": [block, {"type": "text", "text": "[[echo]]"}]}]
            with pytest.raises(CompactionSignatureInvalidError):
                create(bob, later)
            answer = create(alice, later)
            assert SUMMARY_PREFIX + block["content"] in answer.content[0].text


def autocompact(value: int, **fields: Any) -> dict[str, Any]:
    edit = {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": value}}
    return {"edits": [{"type": "clear_tool_uses_20250919"}, edit | fields]}  # clears nothing


@pytest.mark.parametrize("send", SEND)
def test_the_autocompact_edit_compacts_first_past_its_trigger(
    claude: Anthropic, upstream: str, send: Any
) -> None:
    clear(upstream)
    edits = autocompact(1, instructions="[[echo]]")  # added to the prompt, ending the summary
    answer = send(claude, HISTORY, context_management=edits)
    assert [block.type for block in answer.content] == ["compaction", "text"]
    assert answer.stop_reason == "end_turn"
    block = answer.content[0]
    assert "user: my name is Ada" in block.content.splitlines()
    summarized, answered = upstream_log(upstream)
    assert user_texts(summarized["body"])[-1] == STANDALONE_SUMMARY_PROMPT + "\n\n[[echo]]"
    # the answer is sampled from the summary alone, as the next request will show it
    assert user_texts(answered["body"]) == [SUMMARY_PREFIX + block.content]
    # sent back first, with the answer after it, the block stands for the conversation
    clear(upstream)
    later = [
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in answer.content]},
        {"role": "user", "content": "[[echo]]"},
    ]
    assert send(claude, later).stop_reason == "end_turn"
    [sent] = upstream_log(upstream)
    assert user_texts(sent["body"]) == [SUMMARY_PREFIX + block.content, "[[echo]]"]


@pytest.mark.parametrize("send", SEND)
def test_an_empty_answer_after_an_autocompact_ends_as_the_model_ended_it(
    claude: Anthropic, send: Any
) -> None:
    """``stop_reason: "compaction"`` says the response stopped after the block; an answer
    sampled from the summary that holds nothing stopped where the model stopped."""
    # the fake ends its summary with the instructions, which then script the answer
    answer = send(claude, HISTORY, context_management=autocompact(1, instructions="[[words:0]]"))
    assert answer.content[0].type == "compaction"
    assert answer.content[0].content.endswith("\n[[words:0]]")
    assert all(block.type == "text" and not block.text for block in answer.content[1:])
    assert answer.stop_reason == "end_turn"
    assert [i.type for i in answer.usage.iterations or []] == ["compaction", "message"]


@pytest.mark.parametrize("send", SEND)
def test_an_autocompact_counts_its_iterations_apart(claude: Anthropic, send: Any) -> None:
    """Anthropic's ``usage.iterations``: the compaction's, then the answer's; the top-level
    counts are the answer's alone (streamed: the last ``message_delta``'s)."""
    answer = send(claude, HISTORY, context_management=autocompact(1))
    usage = answer.usage
    compaction, message = usage.iterations or []
    assert (compaction.type, message.type) == ("compaction", "message")
    assert compaction.input_tokens > 0
    assert compaction.output_tokens > 0
    assert message.output_tokens > 0
    assert (usage.input_tokens, usage.output_tokens) == (
        message.input_tokens,
        message.output_tokens,
    )
    below = send(claude, HISTORY, context_management=autocompact(100_000))
    assert below.usage.iterations is None


def last_message(body: dict[str, Any]) -> tuple[str, str]:
    """The role and text of the last message an upstream got, whatever its wire."""
    message = (body.get("messages") or body.get("input") or [])[-1]
    content = message.get("content")
    parts = [{"text": content}] if isinstance(content, str) else content or []
    return message["role"], "".join(part.get("text", "") for part in parts)


@pytest.mark.parametrize("send", SEND)
def test_a_prefill_is_continued_after_an_autocompact(
    claude: Anthropic, upstream: str, send: Any, request: pytest.FixtureRequest
) -> None:
    """The summary covers the prefill with the rest, and the answer is still sampled from
    it, as it would be without the compaction."""
    clear(upstream)
    prefill = {"role": "assistant", "content": '{"answer":'}
    answer = send(claude, [*HISTORY, prefill], context_management=autocompact(1))
    assert [block.type for block in answer.content] == ["compaction", "text"]
    assert answer.stop_reason == "end_turn"
    assert 'assistant: {"answer":' in answer.content[0].content.splitlines()
    _, answered = upstream_log(upstream)
    body = answered["body"]
    assert last_message(body) == ("assistant", '{"answer":')
    assert user_texts(body) == [SUMMARY_PREFIX + answer.content[0].content]
    if request.node.callspec.params["gateway"] == "chat":  # asked to continue it (vLLM)
        assert (body["continue_final_message"], body["add_generation_prompt"]) == (True, False)


def test_the_autocompact_edit_pauses_or_waits_for_its_trigger(
    claude: Anthropic, upstream: str
) -> None:
    clear(upstream)
    paused = create(claude, HISTORY, context_management=autocompact(1, pause_after_compaction=True))
    assert block_of(paused)["content"].startswith(SUMMARY_HEADING)
    assert len(upstream_log(upstream)) == 1
    below = create(claude, HISTORY, context_management=autocompact(100_000))
    assert [block.type for block in below.content] == ["text"]
    with pytest.raises(anthropic.BadRequestError) as caught:
        create(claude, HISTORY, context_management=autocompact(0))
    assert caught.value.api_message == (  # type: ignore[union-attr]
        "context_management.edits.1.trigger.value: Input should be greater than or equal to 1"
    )


def test_the_blocks_cache_control_marks_the_summary(
    claude: Anthropic, upstream: str, request: pytest.FixtureRequest
) -> None:
    block = compacted(claude)
    clear(upstream)
    marked = {**block, "cache_control": {"type": "ephemeral"}}
    create(claude, [{"role": "user", "content": [marked, {"type": "text", "text": "go on"}]}])
    [sent] = upstream_log(upstream)
    [summary, *_] = sent["body"].get("messages") or sent["body"]["input"]
    if request.node.callspec.params["gateway"] == "anthropic":  # the breakpoint, as given
        assert summary["content"][0]["cache_control"] == {"type": "ephemeral"}
    else:  # no mark to an API that has none
        assert "cache_control" not in str(summary)


def test_in_a_thread_the_summary_stands_for_the_users_messages_too(
    claude: Anthropic, upstream: str
) -> None:
    """A thread holds the compaction for its client, so the next turn is shown what a
    client sending the block back would show: the summary, not the messages it covers."""
    first = create(claude, HISTORY, thread={"type": "create"})
    turn = [{"role": "user", "content": "and coffee"}]
    compacting = create(
        claude,
        turn,
        thread={"type": "continue", "previous_message_id": first.id},
        compaction=SUMMARIZE,
    )
    summary = block_of(compacting)["content"]
    clear(upstream)
    after = {"type": "continue", "previous_message_id": compacting.id}
    create(claude, [{"role": "user", "content": "[[echo]]"}], thread=after)
    [sent] = upstream_log(upstream)
    assert user_texts(sent["body"]) == [SUMMARY_PREFIX + summary, "[[echo]]"]
