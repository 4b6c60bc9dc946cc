"""CommandKey's string form: unambiguous, and unchanged for every key stored before."""

from __future__ import annotations

from stateway.core.coordination import CommandKey, joined_key


def test_keys_whose_parts_hold_a_unit_separator_do_not_collide() -> None:
    """A WebSocket ``command_id`` or a token's ``sub`` may hold the separator itself."""
    one = CommandKey("acme", "oidc:a\x1fb", "c")
    other = CommandKey("acme", "oidc:a", "b\x1fc")
    assert str(one) != str(other)
    escaped = CommandKey("acme", "oidc:a\x1b", "\x1fc")
    assert (
        len({str(one), str(other), str(escaped), str(CommandKey("acme", "oidc:a\x1b\x1f", "c"))})
        == 4
    )


def test_a_key_of_plain_parts_is_their_plain_join_as_before() -> None:
    """What is stored under a key (a command's outcome in Redis) is found after an upgrade."""
    key = CommandKey("default", "oidc:user-1", "key-1")
    assert str(key) == "default\x1foidc:user-1\x1fkey-1"
    assert joined_key("requests", "acme", "key_abc") == "requests\x1facme\x1fkey_abc"


def test_an_escaped_key_keeps_its_documented_form() -> None:
    """Escaped keys are stored too (an outcome in Redis outlives a process by a day), so
    another version must join a part holding the separator or the escape alike."""
    assert joined_key("a\x1bb", "c\x1fd") == "a\x1b\x1bb\x1fc\x1b\x1fd"
