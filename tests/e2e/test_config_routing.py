"""A configuration file with several named backends, through the real process."""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway


def test_models_route_to_their_backends_and_timeouts_are_504(
    fake_upstream: str, tmp_path: Path
) -> None:
    config = tmp_path / "stateway.toml"
    config.write_text(
        f"""
[storage]
database = "sqlite:///{tmp_path}/gw.db"

[[backends]]
name = "chat-box"
url = "{fake_upstream}"
api = "chat"
models = {{"small" = "fake-small"}}

[[backends]]
name = "responses-box"
url = "{fake_upstream}"
api = "responses"
models = ["big"]
read_timeout = 0.5
context_window = 32768
"""
    )
    with (
        start_gateway(["--config", str(config)]) as url,
        OpenAI(base_url=url + "/v1", api_key="x", max_retries=0) as sdk,
    ):
        small = sdk.responses.create(model="small", input="hi")
        assert small.model == "small"
        assert small.output_text == "Hello! You said: hi"
        big = sdk.responses.create(model="big", input="there", previous_response_id=small.id)
        assert big.output_text == "Hello! You said: there"

        with pytest.raises(openai.NotFoundError) as caught:
            sdk.responses.create(model="unknown", input="x")
        assert caught.value.code == "model_not_found"

        listed = {model.id: model.owned_by for model in sdk.models.list()}
        assert listed == {"small": "chat-box", "big": "responses-box"}
        assert sdk.models.retrieve("big").owned_by == "responses-box"
        with pytest.raises(openai.NotFoundError) as unknown:
            sdk.models.retrieve("unknown")
        assert unknown.value.code == "model_not_found"
        models_in_anthropic_shape(url)

        with pytest.raises(openai.APIStatusError) as timed_out:
            sdk.responses.create(model="big", input="[[slow:3000]]")
        assert timed_out.value.status_code == 504
        assert timed_out.value.code == "upstream_timeout"


def models_in_anthropic_shape(url: str) -> None:
    """The anthropic SDK pages through the listing and retrieves one model."""
    with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude:
        first = claude.models.list(limit=1)
        assert [model.id for model in first.data] == ["small"]
        assert first.has_more is True
        assert [model.id for model in claude.models.list(limit=1)] == ["small", "big"]
        assert [model.id for model in claude.models.list(before_id="big").data] == ["small"]
        big = claude.models.retrieve("big")
        assert (big.id, big.type, big.lifecycle) == ("big", "model", "active")
        assert (big.max_input_tokens, big.max_tokens) == (32768, None)  # its backend's window
        assert claude.models.retrieve("small").max_input_tokens is None  # none declared
        with pytest.raises(anthropic.NotFoundError) as unknown:
            claude.models.retrieve("unknown")
        assert unknown.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
        assert unknown.value.request_id == unknown.value.body["request_id"]  # type: ignore[index]
        with pytest.raises(anthropic.BadRequestError) as cursor:
            claude.models.list(after_id="unknown")
        assert "after_id" in cursor.value.message
