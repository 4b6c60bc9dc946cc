"""``configuration_update`` input items (the Responses API's, in beta): a setting changed
mid-conversation, in effect from there on. Codex sends them with a provider named
``OpenAI`` and its default model: the request's ``reasoning.effort`` stays the first turn's
(its prompt cache), each change of effort is an item. The model gets the latest effort;
no upstream gets the item (a Chat or Anthropic upstream has no place for it, and it was a
400)."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from openai import OpenAI

from tests.e2e.test_upstream_mapping import clear, upstream_requests

MODEL = "fake-model"


def _update(effort: str) -> dict[str, Any]:
    return {"type": "configuration_update", "reasoning": {"effort": effort}}


def _sent_effort(body: dict[str, Any]) -> object:
    if "messages" in body:
        return body.get("reasoning_effort")
    return (body.get("reasoning") or {}).get("effort")


def test_the_latest_update_sets_the_effort_and_reaches_no_upstream(
    client: OpenAI, fake_upstream: str
) -> None:
    """Codex's second turn after its user raised the effort: the request still says
    ``low``, the items say ``low`` then ``high``."""
    clear(fake_upstream)
    items: Any = [
        {"role": "user", "content": "one"},
        _update("low"),
        {"role": "assistant", "content": "Hello! You said: one"},
        {"role": "user", "content": "two"},
        _update("high"),
    ]
    answer = client.responses.create(
        model=MODEL, input=items, reasoning={"effort": "low"}, store=False
    )

    assert answer.status == "completed"
    assert answer.output_text == "Hello! You said: two"
    [sent] = upstream_requests(fake_upstream)
    assert _sent_effort(sent["body"]) == "high"
    assert "configuration_update" not in str(sent["body"])


def test_an_update_earlier_in_the_chain_holds_for_later_responses(
    client: OpenAI, fake_upstream: str
) -> None:
    first = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "one"}, _update("minimal")]
    )
    clear(fake_upstream)
    client.responses.create(
        model=MODEL, previous_response_id=first.id, input="two", reasoning={"effort": "low"}
    )
    [sent] = upstream_requests(fake_upstream)
    assert _sent_effort(sent["body"]) == "minimal"
    assert "configuration_update" not in str(sent["body"])


def test_an_update_with_an_unknown_effort_is_refused(client: OpenAI) -> None:
    items: Any = [{"role": "user", "content": "hi"}, _update("extreme")]
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model=MODEL, input=items)
    assert refused.value.param == "input[1].reasoning.effort"
