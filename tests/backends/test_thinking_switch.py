"""A chat template's thinking switch follows what the client asked, beside the template
flags the body or the backend's ``extra_body`` hold."""

from __future__ import annotations

from typing import Any

import pytest

from stateway.backends.thinking_switch import switch_thinking, thinking_asked


@pytest.mark.parametrize(
    ("effort", "disabled", "asked"),
    [
        (None, False, None),
        ("none", False, False),
        (None, True, False),
        ("high", True, False),
        ("minimal", False, True),
        ("xhigh", False, True),
        ("whatever", False, True),
    ],
)
def test_thinking_asked(effort: str | None, disabled: bool, asked: bool | None) -> None:
    assert thinking_asked(effort, disabled=disabled) is asked


def _switched(body: dict[str, Any], asked: bool | None, **defaults: Any) -> dict[str, Any]:
    switch_thinking(body, "enable_thinking", asked, defaults)
    return body


def test_the_switch_joins_the_template_flags() -> None:
    assert _switched({}, None) == {}
    assert _switched({}, False) == {"chat_template_kwargs": {"enable_thinking": False}}
    own = {"chat_template_kwargs": {"custom": 1}}
    assert _switched(own, True) == {"chat_template_kwargs": {"custom": 1, "enable_thinking": True}}
    defaults = {"chat_template_kwargs": {"preserve_thinking": False}}
    assert _switched({}, True, **defaults) == {
        "chat_template_kwargs": {"preserve_thinking": False, "enable_thinking": True}
    }


def test_a_flag_set_already_is_kept() -> None:
    """The client's own flag, or the operator's in ``extra_body``, is their word."""
    own = {"chat_template_kwargs": {"enable_thinking": True}}
    assert _switched(own, False) == {"chat_template_kwargs": {"enable_thinking": True}}
    fixed = {"chat_template_kwargs": {"enable_thinking": False}}
    assert _switched({}, True, **fixed) == {}
    assert _switched({"chat_template_kwargs": "odd"}, False) == {"chat_template_kwargs": "odd"}
