"""Messages threads (``thread`` on ``POST /v1/messages``: server-held conversation state)
end to end: the real ``stateway serve`` in front of the real fake upstream (its Chat and
Messages wires), driven by the official ``anthropic`` SDK's ``beta.messages``; another
tenant's thread through a gateway with API keys."""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import anthropic
import pytest
from anthropic import Anthropic
from anthropic.types.thread_already_continued_error import ThreadAlreadyContinuedError
from anthropic.types.thread_continue_in_flight_error import ThreadContinueInFlightError
from anthropic.types.thread_not_found_error import ThreadNotFoundError
from anthropic.types.tool_reference_unresolved_error import ToolReferenceUnresolvedError

from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.authenticated import auth_gateway, create_key
from tests.e2e.test_messages_sdk import MODEL, TOOL_PROMPT, TOOLS, clear, upstream_log

SYSTEM = "be brief"
CREATE: Any = {"type": "create"}


def after(message: anthropic.types.beta.BetaMessage) -> Any:
    return {"type": "continue", "previous_message_id": message.id}


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(
    scope="module",
    params=[
        "sqlite-chat",
        "sqlite-anthropic",
        pytest.param("postgres-chat", marks=pytest.mark.postgres),
    ],
)
def storage_api(request: pytest.FixtureRequest) -> tuple[str, str]:
    """The thread's storage and upstream API: each API on SQLite, and PostgreSQL's
    statements (its claim, ``last_response_id``) once."""
    database_kind, api = str(request.param).split("-")
    return database_kind, api


@pytest.fixture(scope="module")
def upstream_api(storage_api: tuple[str, str]) -> str:
    return storage_api[1]


@pytest.fixture(scope="module")
def gateway(
    request: pytest.FixtureRequest,
    upstream: str,
    storage_api: tuple[str, str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[str]:
    database_kind, upstream_api = storage_api
    if database_kind == "sqlite":
        database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    else:
        database = request.getfixturevalue("postgres_url")
    args = ["--upstream", upstream, "--upstream-api", upstream_api, "--database", database]
    with start_gateway(args) as url:
        yield url


def send(claude: Anthropic, messages: list[Any], **kwargs: Any) -> anthropic.types.beta.BetaMessage:
    return claude.beta.messages.create(
        model=MODEL, max_tokens=kwargs.pop("max_tokens", 400), messages=messages, **kwargs
    )


def streamed(
    claude: Anthropic, messages: list[Any], **kwargs: Any
) -> anthropic.types.beta.BetaMessage:
    with claude.beta.messages.stream(
        model=MODEL, max_tokens=kwargs.pop("max_tokens", 400), messages=messages, **kwargs
    ) as stream:
        return stream.get_final_message()


def said(sent: dict[str, Any], upstream_api: str) -> tuple[list[Any], list[str]]:
    """What the model was sent: its system text and messages as (role, text) pairs, and
    the names of the tools it was offered."""
    body = sent["body"]
    if upstream_api == "anthropic":
        system = body.get("system") or []
        blocks = [{"text": system}] if isinstance(system, str) else system
        turns: list[Any] = [("system", block["text"]) for block in blocks]
        for message in body["messages"]:
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            turns += [(message["role"], _text(block)) for block in blocks]
        return turns, [tool["name"] for tool in body.get("tools") or []]
    turns = []
    for message in body["messages"]:
        if message.get("tool_calls"):
            turns += [("assistant", call["function"]["name"]) for call in message["tool_calls"]]
        content = message.get("content")
        if content:
            text = content if isinstance(content, str) else content[0]["text"]
            turns.append((message["role"], text))
    return turns, [tool["function"]["name"] for tool in body.get("tools") or []]


def _text(block: dict[str, Any]) -> str:
    match block["type"]:
        case "text":
            return str(block["text"])
        case "tool_use":
            return str(block["name"])
        case "tool_result":
            content = block["content"]
            return content if isinstance(content, str) else str(content[0]["text"])
    return str(block["type"])


@pytest.mark.parametrize("continued", [send, streamed])
def test_a_continue_sends_the_model_the_whole_thread(
    claude: Anthropic, upstream: str, upstream_api: str, continued: Any
) -> None:
    """Claude Code's continue: the new turn only, the system again, no tools (the thread's
    are offered); the model gets every earlier turn."""
    clear(upstream)
    first = send(
        claude,
        [{"role": "user", "content": TOOL_PROMPT}],
        system=SYSTEM,
        tools=TOOLS,
        thread=CREATE,
    )
    assert first.id.startswith("msg_")
    assert first.stop_reason == "tool_use"
    [use] = [block for block in first.content if block.type == "tool_use"]
    result = {"type": "tool_result", "tool_use_id": use.id, "content": "sunny"}
    second = continued(
        claude, [{"role": "user", "content": [result]}], system=SYSTEM, thread=after(first)
    )
    assert second.content[-1].text == "Tool said: sunny"
    assert second.id != first.id
    third = send(claude, [{"role": "user", "content": "thanks"}], thread=after(second))
    assert third.content[-1].text == "Hello! You said: thanks"
    turns, tools = said(upstream_log(upstream)[-1], upstream_api)
    tool_text = [(role, text) for role, text in turns if role != "system"]
    assert turns[0] == ("system", SYSTEM)  # inherited by the third, which sent none
    assert [text for _, text in turns].count(SYSTEM) == 1
    assert tool_text == [
        ("user", TOOL_PROMPT),
        ("assistant", "get_weather"),
        ("tool" if upstream_api == "chat" else "user", "sunny"),
        ("assistant", "Tool said: sunny"),
        ("user", "thanks"),
    ]
    assert tools == ["get_weather"]  # never sent again, still offered


def test_a_continue_offers_what_the_threads_tool_searches_loaded(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """The tool search server tool: a continue without tools is offered what the
    thread's searches loaded (its stored outputs), the other deferred tools held back."""
    search = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}
    weather = {**TOOLS[0], "defer_loading": True}
    orders = {"name": "list_orders", "input_schema": {"type": "object"}, "defer_loading": True}
    prompt = '[[tool:tool_search:{"query":"weather"}]] [[then:get_weather:{"city":"Oslo"}]]'
    first = send(
        claude,
        [{"role": "user", "content": prompt}],
        tools=[search, weather, orders],
        thread=CREATE,
    )
    assert [block.type for block in first.content] == [
        "server_tool_use",
        "tool_search_tool_result",
        "tool_use",
    ]
    result = {"type": "tool_result", "tool_use_id": first.content[-1].id, "content": "sunny"}
    clear(upstream)
    second = send(claude, [{"role": "user", "content": [result]}], thread=after(first))
    assert second.content[-1].text == "Tool said: sunny"
    _, tools = said(upstream_log(upstream)[-1], upstream_api)
    assert tools == ["get_weather", "tool_search"]


def test_a_continue_replaces_the_system_and_tools_it_sends(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    first = send(claude, [{"role": "user", "content": "hi"}], system=SYSTEM, tools=TOOLS)
    assert first.content[-1].text == "Hello! You said: hi"  # no thread: nothing held
    first = send(claude, [{"role": "user", "content": "hi"}], system=SYSTEM, thread=CREATE)
    other = [{"name": "lookup", "description": "look up", "input_schema": {"type": "object"}}]
    clear(upstream)
    send(
        claude,
        [{"role": "user", "content": "again"}],
        system="be thorough",
        tools=other,
        thread=after(first),
    )
    turns, tools = said(upstream_log(upstream)[-1], upstream_api)
    assert [text for role, text in turns if role == "system"] == ["be thorough"]
    assert [text for role, text in turns if role != "system"] == [
        "hi",
        "Hello! You said: hi",
        "again",
    ]
    assert tools == ["lookup"]


def test_each_message_is_continued_once(claude: Anthropic) -> None:
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)
    second = send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    with pytest.raises(ThreadAlreadyContinuedError) as caught:
        send(claude, [{"role": "user", "content": "two again"}], thread=after(first))
    assert caught.value.status_code == 400
    assert caught.value.error_code == "thread_already_continued"
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert send(claude, [{"role": "user", "content": "3"}], thread=after(second)).content


def test_a_continue_in_flight_refuses_another(claude: Anthropic) -> None:
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)
    slow = [{"role": "user", "content": "[[slow:150]] [[words:20]]"}]
    with claude.beta.messages.stream(
        model=MODEL, max_tokens=400, messages=slow, thread=after(first)
    ) as stream:
        events = iter(stream)
        started = next(events)
        assert started.type == "message_start"
        with pytest.raises(ThreadContinueInFlightError) as caught:
            send(claude, [{"role": "user", "content": "two"}], thread=after(first))
        assert caught.value.status_code == 400
        # a continue from a message still being generated waits for it as well
        with pytest.raises(ThreadContinueInFlightError):
            send(
                claude,
                [{"role": "user", "content": "x"}],
                thread={"type": "continue", "previous_message_id": started.message.id},
            )
        finished = stream.get_final_message()
    assert finished.content[-1].text.endswith("w20")
    with pytest.raises(ThreadAlreadyContinuedError):
        send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    assert send(claude, [{"role": "user", "content": "3"}], thread=after(finished)).content


@pytest.mark.parametrize(
    "message_id",
    ["msg_nothing_here", "resp_not_a_message", "plain"],
)
def test_an_unknown_message_is_thread_not_found(claude: Anthropic, message_id: str) -> None:
    with pytest.raises(ThreadNotFoundError) as caught:
        send(
            claude,
            [{"role": "user", "content": "hi"}],
            thread={"type": "continue", "previous_message_id": message_id},
        )
    assert caught.value.status_code == 404
    error = caught.value.body["error"]  # type: ignore[index]
    assert (error["type"], error["details"]) == (
        "not_found_error",
        {"error_code": "thread_not_found"},
    )


def test_a_count_of_a_continue_counts_the_thread(claude: Anthropic) -> None:
    """``count_tokens`` with ``thread`` counts what the turn would send: the thread's
    earlier turns and system too; it is refused as the turn would be, and holds nothing."""
    first = send(claude, [{"role": "user", "content": "tell " * 300}], system=SYSTEM, thread=CREATE)
    new_turn: Any = [{"role": "user", "content": "and then?"}]

    def count(thread: Any) -> int:
        extra = {} if thread is None else {"thread": thread}
        counted = claude.beta.messages.count_tokens(
            model=MODEL, messages=new_turn, extra_body=extra
        )
        return counted.input_tokens

    alone, within = count(None), count(after(first))
    assert within >= alone + 300  # the first turn's 300 words at least
    with pytest.raises(ThreadNotFoundError):
        count({"type": "continue", "previous_message_id": "msg_nothing_here"})
    second = send(claude, new_turn, thread=after(first))  # the count held nothing
    assert second.stop_reason == "end_turn"
    with pytest.raises(ThreadAlreadyContinuedError):
        count(after(first))


def test_a_message_made_outside_a_thread_is_thread_not_found(claude: Anthropic) -> None:
    plain = send(claude, [{"role": "user", "content": "hi"}])  # never stored
    with pytest.raises(ThreadNotFoundError):
        send(claude, [{"role": "user", "content": "hi"}], thread=after(plain))


def test_a_failed_turn_keeps_nothing(claude: Anthropic) -> None:
    """A failed create holds no thread; a failed continue leaves its thread where it was."""
    with pytest.raises(anthropic.InternalServerError):
        send(claude, [{"role": "user", "content": "[[error:500]] hi"}], thread=CREATE)
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)
    with pytest.raises(anthropic.InternalServerError):
        send(claude, [{"role": "user", "content": "[[error:500]] two"}], thread=after(first))
    again = send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    assert again.content[-1].text == "Hello! You said: two"


@pytest.mark.parametrize("storage_api", ["sqlite-anthropic"], indirect=True)
def test_a_paused_turn_is_resumed_by_a_continue_without_messages(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """After ``pause_turn`` the SDK's thread helper sends a continue with no messages:
    the thread holds the paused turn, and the model goes on from it (sent it last, as a
    client without a thread sends the paused answer back). Only the fake's Messages wire
    pauses a turn: on an Anthropic upstream alone."""
    thread = claude.beta.messages.thread(model=MODEL, max_tokens=400, system=SYSTEM)
    paused = thread.send({"role": "user", "content": "[[stop:pause_turn]] go on"})
    assert paused.stop_reason == "pause_turn"
    clear(upstream)
    resumed = thread.send()
    [sent] = upstream_log(upstream)
    assert said(sent, upstream_api)[0] == [
        ("system", SYSTEM),
        ("user", "[[stop:pause_turn]] go on"),
        ("assistant", paused.content[-1].text),  # type: ignore[union-attr]
    ]
    assert thread.previous_message_id == resumed.id
    after_it = thread.send({"role": "user", "content": "next"})
    assert after_it.content[-1].text == "Hello! You said: next"  # type: ignore[union-attr]


def test_a_continue_without_messages_after_a_finished_turn_is_refused(
    claude: Anthropic,
) -> None:
    """Only a paused turn goes on from nothing new: after a finished one there is nothing
    to answer, and the thread stays where it was."""
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)
    with pytest.raises(anthropic.BadRequestError) as caught:
        send(claude, [], thread=after(first))
    message = caught.value.body["error"]["message"]  # type: ignore[index]
    assert message.startswith("messages: at least one message is required")
    again = send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    assert again.content[-1].text == "Hello! You said: two"  # type: ignore[union-attr]


def test_a_malformed_thread_is_named(claude: Anthropic) -> None:
    for thread, param in [
        ({"type": "fork"}, "thread.type"),
        ({"type": "continue"}, "thread.previous_message_id"),
    ]:
        with pytest.raises(anthropic.BadRequestError) as caught:
            send(claude, [{"role": "user", "content": "hi"}], thread=thread)
        message = caught.value.body["error"]["message"]  # type: ignore[index]
        assert message.startswith(param + ":")


def test_another_tenants_thread_is_not_found(
    upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    directory = tmp_path_factory.mktemp("threads")
    database = f"sqlite:///{directory / 'stateway.db'}"
    suffix = uuid.uuid4().hex[:8]
    with auth_gateway(directory, upstream, database) as gateway:
        names = ("alice", "bob", "alice")  # alice's second key: her tenant's threads
        keys = [create_key(database, f"{name}-{suffix}") for name in names]
        alice, bob, other_key = (
            Anthropic(base_url=gateway.url, api_key=key, max_retries=0) for key in keys
        )
        with alice, bob, other_key:
            first = send(alice, [{"role": "user", "content": "mine"}], thread=CREATE)
            with pytest.raises(ThreadNotFoundError) as caught:
                send(bob, [{"role": "user", "content": "hi"}], thread=after(first))
            missing = {"type": "continue", "previous_message_id": "msg_" + "0" * 24}
            with pytest.raises(ThreadNotFoundError) as unknown:
                send(bob, [{"role": "user", "content": "hi"}], thread=missing)
            shown = caught.value.body["error"]  # type: ignore[index]
            expected = unknown.value.body["error"]  # type: ignore[index]
            assert shown["message"].replace(first.id, "ID") == expected["message"].replace(
                missing["previous_message_id"], "ID"
            )
            # the owner's thread is untouched
            second = send(alice, [{"role": "user", "content": "more"}], thread=after(first))
            assert second.content[-1].text == "Hello! You said: more"
            third = send(other_key, [{"role": "user", "content": "on"}], thread=after(second))
            assert third.content[-1].text == "Hello! You said: on"


def test_a_prewarm_holds_nothing(claude: Anthropic, upstream: str, upstream_api: str) -> None:
    """``max_tokens: 0`` warms a turn then sent in full (as Claude Code does): it checks
    the thread's context, but the thread stays where it was, and a prewarm's create
    holds no thread."""
    first = send(claude, [{"role": "user", "content": "one"}], system=SYSTEM, thread=CREATE)
    turn = [{"role": "user", "content": "two"}]
    warmed = send(claude, turn, thread=after(first), max_tokens=0)
    assert warmed.content == []
    clear(upstream)
    second = send(claude, turn, thread=after(first))
    assert second.content[-1].text == "Hello! You said: two"
    turns, _ = said(upstream_log(upstream)[-1], upstream_api)
    assert turns == [
        ("system", SYSTEM),
        ("user", "one"),
        ("assistant", "Hello! You said: one"),
        ("user", "two"),
    ]
    with pytest.raises(ThreadNotFoundError):
        send(claude, turn, thread=after(warmed))
    created = send(claude, turn, thread=CREATE, max_tokens=0)
    with pytest.raises(ThreadNotFoundError):
        send(claude, turn, thread=after(created))
    with pytest.raises(ThreadAlreadyContinuedError):  # checked as the turn would be
        send(claude, turn, thread=after(first), max_tokens=0)


def test_a_turn_its_client_left_keeps_nothing(claude: Anthropic) -> None:
    """A client that leaves a turn (a timeout, an interrupted stream) may never have seen
    its id: the turn is not held, and the thread goes on from the message before it."""
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)
    late = [{"role": "user", "content": "[[slow:5000]]"}]
    with pytest.raises(anthropic.APITimeoutError):
        send(claude.with_options(timeout=0.3), late, thread=after(first))
    slow = [{"role": "user", "content": "[[slow:100]] [[words:50]]"}]
    with claude.beta.messages.stream(
        model=MODEL, max_tokens=400, messages=slow, thread=after(first)
    ) as stream:
        left = next(iter(stream))
        assert left.type == "message_start"
    again = _once_ended(
        lambda: send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    )
    assert again.content[-1].text == "Hello! You said: two"
    with pytest.raises(ThreadNotFoundError):
        send(claude, [{"role": "user", "content": "x"}], thread=after(left.message))


def _once_ended(
    turn: Callable[[], anthropic.types.beta.BetaMessage],
) -> anthropic.types.beta.BetaMessage:
    """``turn``, sent again while the one it follows is still ending (``in flight``: the
    SDK's advice is to wait for it)."""
    for _ in range(200):
        try:
            return turn()
        except ThreadContinueInFlightError:
            time.sleep(0.02)
    return turn()


def test_concurrent_continues_from_one_message_make_one_turn(
    claude: Anthropic, gateway: str, upstream: str, upstream_api: str
) -> None:
    """Continues from the same message at once, each on its own connection: one wins, the
    others are refused in the thread's words (never a 500), and the thread does not fork."""
    first = send(claude, [{"role": "user", "content": "one"}], thread=CREATE)

    def turn(number: int) -> anthropic.types.beta.BetaMessage | anthropic.APIStatusError:
        with Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as own:
            message = [{"role": "user", "content": f"[[slow:20]] [[words:3]] try {number}"}]
            try:
                return send(own, message, thread=after(first))
            except anthropic.APIStatusError as refused:
                return refused

    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        results = list(pool.map(turn, range(6)))
    [won] = [result for result in results if not isinstance(result, anthropic.APIStatusError)]
    refused = [result for result in results if isinstance(result, anthropic.APIStatusError)]
    assert all(
        isinstance(result, ThreadContinueInFlightError | ThreadAlreadyContinuedError)
        for result in refused
    ), [(result.status_code, result.body) for result in refused]
    clear(upstream)
    send(claude, [{"role": "user", "content": "after"}], thread=after(won))
    turns, _ = said(upstream_log(upstream)[-1], upstream_api)
    users = [text for role, text in turns if role == "user"]
    assert users[0::2] == ["one", "after"]  # one turn between them: the winner's
    assert len(users) == 3
    assert users[1].endswith(tuple(f"try {n}" for n in range(6)))


def test_a_compaction_replaces_the_thread_before_it(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """A Messages compaction summarizes the user's messages too (its block is sent back in
    place of the whole conversation): a thread's later turns see its system, the summary
    and what came after it, as a client sending the block would."""
    first = send(claude, [{"role": "user", "content": "one"}], system=SYSTEM, thread=CREATE)
    second = send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    compacted = send(
        claude,
        [{"role": "user", "content": "three"}],
        thread=after(second),
        extra_body={"compaction": {"type": "summarize"}},
    )
    [block] = compacted.content
    assert block.type == "compaction"
    assert "user: one" in (block.content or "")
    clear(upstream)
    fourth = send(claude, [{"role": "user", "content": "four"}], thread=after(compacted))
    summary = ("user", SUMMARY_PREFIX + (block.content or ""))
    turns, _ = said(upstream_log(upstream)[-1], upstream_api)
    assert turns == [("system", SYSTEM), summary, ("user", "four")]
    sent_back = [block.model_dump(), {"type": "text", "text": "five"}]  # replaces the thread
    send(claude, [{"role": "user", "content": sent_back}], thread=after(fourth))
    turns, _ = said(upstream_log(upstream)[-1], upstream_api)
    assert turns == [
        ("system", SYSTEM),
        summary,
        ("user", "five"),
    ]


def test_a_turn_stopped_after_its_compaction_is_resumed_without_messages(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """``stop_reason: "compaction"`` (a compaction request's, ``pause_after_compaction``'s)
    hands the turn back before the model answers: the SDK's thread helper and tool runner
    go on with a continue sending no messages, answered from the summary."""
    first = send(claude, [{"role": "user", "content": "one"}], system=SYSTEM, thread=CREATE)
    compacted = send(
        claude,
        [{"role": "user", "content": "two"}],
        thread=after(first),
        extra_body={"compaction": {"type": "summarize"}},
    )
    assert compacted.stop_reason == "compaction"
    [block] = compacted.content
    assert block.type == "compaction"
    clear(upstream)
    answered = send(claude, [], thread=after(compacted))
    assert answered.stop_reason == "end_turn"
    turns, _ = said(upstream_log(upstream)[-1], upstream_api)
    assert turns == [("system", SYSTEM), ("user", SUMMARY_PREFIX + (block.content or ""))]


def test_every_turns_cache_breakpoint_stays_within_anthropics_four(claude: Anthropic) -> None:
    """Each turn marks its last message for the prompt cache, as Claude Code does, and the
    thread keeps every turn's messages: past four marks an Anthropic upstream refuses the
    request, so the gateway sends the system's and the latest ones."""
    system: Any = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    thread = CREATE
    for turn in range(6):
        content: Any = [
            {"type": "text", "text": f"turn {turn}", "cache_control": {"type": "ephemeral"}}
        ]
        message = claude.beta.messages.create(
            model=MODEL,
            max_tokens=64,
            system=system,
            messages=[{"role": "user", "content": content}],
            thread=thread,
        )
        assert message.stop_reason == "end_turn"
        thread = after(message)


def test_a_thread_keeps_its_turns_tool_changes(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """A turn's mid-conversation tool changes stay with the thread: a continue declaring
    no tools is offered the tools in effect at the end of the turn before it, with its own
    changes applied to them (judged against them: naming none is refused)."""
    lookup = {"name": "lookup", "input_schema": {"type": "object"}}
    clock = {"name": "clock", "input_schema": {"type": "object"}}

    def changes(*blocks: Any) -> Any:
        return {"role": "system", "content": list(blocks)}

    removal = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "clock"}}
    addition = {"type": "tool_addition", "tool": {"type": "tool_definition", "definition": lookup}}
    first = send(
        claude,
        [{"role": "user", "content": "one"}, changes(removal, addition)],
        tools=[*TOOLS, clock],
        thread=CREATE,
    )
    clear(upstream)
    second = send(claude, [{"role": "user", "content": "two"}], thread=after(first))
    assert said(upstream_log(upstream)[-1], upstream_api)[1] == ["get_weather", "lookup"]
    gone = {"type": "tool_removal", "tool": {"type": "tool_reference", "name": "lookup"}}
    third = send(
        claude, [{"role": "user", "content": "three"}, changes(gone)], thread=after(second)
    )
    assert said(upstream_log(upstream)[-1], upstream_api)[1] == ["get_weather"]
    unknown = {"type": "tool_addition", "tool": {"type": "tool_reference", "name": "nowhere"}}
    with pytest.raises(ToolReferenceUnresolvedError) as caught:
        send(claude, [{"role": "user", "content": "four"}, changes(unknown)], thread=after(third))
    assert caught.value.error_code == "tool_reference_unresolved"
    assert "messages.1.content.0.tool.name" in caught.value.message
