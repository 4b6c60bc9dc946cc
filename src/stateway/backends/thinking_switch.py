"""A chat template's own thinking switch (``[[backends]] thinking_switch``).

Open models whose chat template turns thinking on and off by a flag of its own (Qwen3's
and GLM's ``enable_thinking``, DeepSeek-V3.1's and Granite's ``thinking``) ignore
``reasoning_effort``: vLLM and SGLang hand the template the flags of a request's
``chat_template_kwargs``. With the flag named, it follows what the client asked: false
for no reasoning (the effort ``none``; a Messages client's ``thinking: disabled``), true
for any other effort, and left to the template when the client asked nothing. It joins
the ``chat_template_kwargs`` the body holds (a Chat client's own), else the backend's
``extra_body`` ones; a flag they set already is kept (the client's, or the operator's,
word).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stateway.backends.reasoning_efforts import NONE

KWARGS = "chat_template_kwargs"


def thinking_asked(effort: object, *, disabled: bool = False) -> bool | None:
    """Whether the client asked for thinking (an effort), for none (``none``, or thinking
    disabled), or said nothing (None)."""
    if disabled or effort == NONE:
        return False
    return None if effort is None else True


def switch_thinking(
    body: dict[str, Any], switch: str, asked: bool | None, defaults: Mapping[str, Any]
) -> None:
    """Set ``switch`` in ``body``'s template flags to ``asked`` (in place), beside the flags
    it holds or, holding none, the backend's ``defaults`` (its ``extra_body``)."""
    if asked is None:
        return
    flags = body.get(KWARGS, defaults.get(KWARGS, {}))
    if isinstance(flags, Mapping) and switch not in flags:
        body[KWARGS] = {**flags, switch: asked}
