"""The outputs of a round of calls in the order the model made the calls.

Clients answer parallel calls as their tools finish: Claude Code sends the ``tool_result``
of a quick command before that of a slow one it was asked for first. Many open models'
chat templates tie a result to its call by position only (Qwen's ``<tool_response>``,
Llama's ``ipython`` turns carry no call id), so a model served by them would read each
result as the other call's. Every upstream is sent each run of outputs in the order of the
calls they answer; an output answering no call of the round just before it keeps its place
after those that do. A round's calls are those since the last output or user message:
reasoning or the model's own text may come between them (Claude writes between its
``tool_use`` blocks).
"""

from __future__ import annotations

from stateway.core.items import FUNCTION_CALL, FUNCTION_CALL_OUTPUT, MESSAGE, Item


def in_call_order(items: list[Item]) -> list[Item]:
    """``items`` with each run of consecutive ``function_call_output`` items ordered as the
    ``function_call`` items just before the run (``items`` itself is not changed)."""
    out: list[Item] = []
    calls: dict[object, int] = {}
    """The call ids of the last run of calls, by position."""
    answers: list[Item] = []
    """The run of outputs being read."""
    in_calls = False
    for item in items:
        kind = item.get("type")
        if kind == FUNCTION_CALL_OUTPUT:
            answers.append(item)
            in_calls = False
            continue
        if answers:
            out += _ordered(answers, calls)
            answers = []
        if kind == FUNCTION_CALL:
            if not in_calls:
                calls = {}
                in_calls = True
            calls.setdefault(item.get("call_id"), len(calls))
        elif kind == MESSAGE and item.get("role") != "assistant":  # a turn of the client's:
            in_calls = False  # the model's own text and reasoning may come between calls
        out.append(item)
    return out + _ordered(answers, calls)


def _ordered(answers: list[Item], calls: dict[object, int]) -> list[Item]:
    if len(answers) < 2:
        return answers
    last = len(calls)
    return sorted(answers, key=lambda answer: calls.get(answer.get("call_id"), last))
