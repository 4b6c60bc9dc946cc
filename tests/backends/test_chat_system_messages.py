"""System messages on a Chat upstream: one leading system message, later ones as user
reminders, so chat templates that take a system message only first accept the request."""

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from stateway.backends.chat_request import to_upstream
from stateway.backends.chat_system_messages import merge_user_turns, place_system_messages
from stateway.core.items import Item
from tests.backends.test_openai_chat import request, user


def system(text: str) -> dict[str, Any]:
    return {"role": "system", "content": text}


def reminder(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>"


def calls(*ids: str) -> dict[str, Any]:
    tool_calls = [
        {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
    ]
    return {"role": "assistant", "content": None, "tool_calls": tool_calls}


def result(call_id: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "content": "ok"}


def test_leading_system_messages_join_into_one() -> None:
    placed = place_system_messages([system("a"), system(""), system("b"), user_text("hi")])

    assert placed == [system("a\n\nb"), user_text("hi")]


def test_a_lone_leading_system_message_is_left_as_it_is() -> None:
    named = {"role": "system", "content": "rules", "name": "ops"}

    assert place_system_messages([named, user_text("hi")]) == [named, user_text("hi")]


def user_text(text: str) -> dict[str, Any]:
    return {"role": "user", "content": text}


def test_a_system_message_after_the_users_turn_joins_that_turn_as_a_reminder() -> None:
    """Claude Code's shape: the prompt (after its own reminder block), then the
    environment as a system message."""
    prompt = {
        "role": "user",
        "content": [
            {"type": "text", "text": reminder("context")},
            {"type": "text", "text": "Say hi"},
        ],
    }

    placed = place_system_messages([system("rules"), prompt, system("# Environment")])

    assert placed == [
        system("rules"),
        {
            "role": "user",
            "content": [
                {"type": "text", "text": reminder("context")},
                {"type": "text", "text": "Say hi"},
                {"type": "text", "text": reminder("# Environment")},
            ],
        },
    ]


def test_a_string_user_message_gets_the_reminder_after_a_blank_line() -> None:
    placed = place_system_messages([user_text("hi"), system("note")])

    assert placed == [user_text(f"hi\n\n{reminder('note')}")]


def test_after_an_assistant_turn_the_reminder_leads_the_next_user_message() -> None:
    answer = {"role": "assistant", "content": "hello"}

    placed = place_system_messages([user_text("hi"), answer, system("one"), user_text("more")])

    assert placed == [user_text("hi"), answer, user_text(f"{reminder('one')}\n\nmore")]
    parts = {"role": "user", "content": [{"type": "text", "text": "more"}]}
    placed = place_system_messages([answer, system("one"), system("two"), parts])
    assert placed[1]["content"] == [
        {"type": "text", "text": reminder("one")},
        {"type": "text", "text": reminder("two")},
        {"type": "text", "text": "more"},
    ]


def test_between_two_assistant_turns_the_reminder_is_a_user_message_of_its_own() -> None:
    first, second = {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}

    placed = place_system_messages([user_text("hi"), first, system("note"), second])

    assert placed == [user_text("hi"), first, user_text(reminder("note")), second]


def test_a_reminder_never_separates_tool_calls_from_their_results() -> None:
    placed = place_system_messages(
        [user_text("go"), calls("c1", "c2"), system("note"), result("c1"), result("c2")]
    )

    assert placed == [
        user_text("go"),
        calls("c1", "c2"),
        result("c1"),
        result("c2"),
        user_text(reminder("note")),
    ]
    followed = place_system_messages([calls("c1"), system("note"), result("c1"), calls("c2")])
    assert [m["role"] for m in followed] == ["assistant", "tool", "user", "assistant"]


def test_a_conversation_without_system_messages_is_unchanged() -> None:
    messages = [user_text("hi"), calls("c1"), result("c1"), {"role": "assistant", "content": "x"}]

    assert place_system_messages([dict(m) for m in messages]) == messages


def test_the_chat_backend_sends_system_text_only_first() -> None:
    """Instructions, a leading developer message, and a developer message later on (a
    Responses client) or a system message after the user's turn (Claude Code)."""

    def message(role: str, text: str) -> Item:
        return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}

    items: list[Item] = [
        message("developer", "dev"),
        user("hi"),
        message("system", "# Environment"),
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "yo"}],
        },
        message("developer", "later"),
        user("again"),
    ]

    messages = to_upstream(request(items, instructions="sys"))["messages"]

    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[0]["content"] == "sys\n\ndev"
    assert messages[1]["content"][-1] == {"type": "text", "text": reminder("# Environment")}
    assert messages[3]["content"] == [
        {"type": "text", "text": reminder("later")},
        {"type": "text", "text": "again"},
    ]


_MESSAGE = st.one_of(
    st.builds(system, st.text(alphabet="abc", max_size=3)),
    st.builds(user_text, st.text(alphabet="xyz", min_size=1, max_size=3)),
    st.builds(
        lambda text: {"role": "user", "content": [{"type": "text", "text": text}]},
        st.text(alphabet="xyz", min_size=1, max_size=3),
    ),
    st.builds(lambda text: {"role": "assistant", "content": text}, st.sampled_from(["p", "q"])),
    st.sampled_from(["tool round", "tool round with a note"]),
)


def _conversation(drawn: list[Any]) -> list[dict[str, Any]]:
    """Drawn messages, each "tool round" an assistant's call and its result (with a system
    message between them if "with a note")."""
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(drawn):
        if isinstance(message, str):
            note = [system("note")] if message.endswith("note") else []
            messages += [calls(f"c{index}"), *note, result(f"c{index}")]
        else:
            messages.append(copy.deepcopy(message))
    return messages


def _texts(messages: list[dict[str, Any]]) -> list[str]:
    """Every text in order, reminders unwrapped."""
    texts: list[str] = []
    for message in messages:
        content = message["content"]
        pieces = [content] if isinstance(content, str) else [p["text"] for p in content or []]
        for piece in pieces:
            for text in piece.split("\n\n"):
                texts.append(
                    text.removeprefix("<system-reminder>\n").removesuffix("\n</system-reminder>")
                )
    return [text for text in texts if text]


@given(st.lists(_MESSAGE, max_size=8))
@settings(max_examples=300, deadline=None)
def test_system_text_comes_only_first_and_nothing_is_lost(drawn: list[Any]) -> None:
    messages = _conversation(drawn)
    expected_texts = _texts(messages)
    leading = 0
    while leading < len(messages) and messages[leading]["role"] == "system":
        leading += 1

    placed = place_system_messages(_conversation(drawn))

    roles = [m["role"] for m in placed]
    assert "system" not in roles[1:]
    assert sorted(_texts(placed)) == sorted(expected_texts)
    late = [m for m in messages[leading:] if m["role"] == "system" and m["content"]]
    assert str(placed).count("<system-reminder>") == len(late)
    for position, message in enumerate(placed):
        if message.get("tool_calls"):
            assert placed[position + 1]["role"] == "tool"
    non_system = [m for m in placed if m["role"] != "system"]
    assert [m for m in non_system if m["role"] != "user"] == [
        m for m in messages if m["role"] not in ("system", "user")
    ]


def test_consecutive_user_messages_become_one_where_roles_must_alternate() -> None:
    """Codex sends its instructions, its environment and the prompt as three user
    messages; a strict template ("roles must alternate") refuses them."""
    items: list[Item] = [user("rules"), user("env"), user("do it")]
    plain = to_upstream(request(items))["messages"]
    assert [m["role"] for m in plain] == ["user", "user", "user"]  # by default, apart
    [merged] = to_upstream(request(items), alternate_roles=True)["messages"]
    assert merged["role"] == "user"
    assert [part["text"] for part in merged["content"]] == ["rules", "env", "do it"]
    turns = [user_text("a"), {"role": "assistant", "content": "b"}, user_text(""), user_text("c")]
    assert [m["role"] for m in merge_user_turns(turns)] == ["user", "assistant", "user"]
    assert merge_user_turns(turns)[2]["content"] == [{"type": "text", "text": "c"}]
