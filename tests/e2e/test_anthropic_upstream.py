"""An Anthropic upstream's answers, as each frontend's SDK receives them (the fake upstream
streams Messages events as Anthropic does)."""

from __future__ import annotations

from pathlib import Path

from openai import OpenAI

from tests.e2e.configured import configured_gateway

MODEL = "fake-model"
NO_INPUT = {"type": "object", "properties": {}}


def test_a_streamed_call_without_input_has_empty_object_arguments(
    fake_upstream: str, tmp_path: Path
) -> None:
    """Anthropic streams a call without input as one empty ``partial_json``: its arguments
    reach Responses and Chat clients as ``{}``, which they can parse, not as ``""``."""
    with (
        configured_gateway(tmp_path, {"url": fake_upstream, "api": "anthropic"}) as gateway,
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
