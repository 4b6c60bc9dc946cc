"""The sealing key across restarts: generated once and kept in the database, or given by
``STATEWAY_SEALING_KEY``; a key that does not match refuses what another key sealed (an item
stored in a conversation too, named by the conversation)."""

from __future__ import annotations

import base64
import sqlite3
from pathlib import Path

import openai
import pytest
from openai import OpenAI

from stateway.launch import start_gateway

MODEL = "fake-model"


def compact(url: str) -> dict[str, object]:
    with OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        compacted = client.responses.compact(model=MODEL, input="keep this")
        return compacted.output[-1].model_dump()


def continue_from(url: str, item: dict[str, object]) -> str:
    with OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        answer = client.responses.create(
            model=MODEL, input=[item, {"role": "user", "content": "[[echo]]"}]
        )
        return answer.output_text


def converse(url: str, item: dict[str, object]) -> str:
    """A conversation holding ``item``."""
    with OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        added = {key: value for key, value in item.items() if key != "id"}
        return client.conversations.create(items=[added]).id  # type: ignore[list-item]


def continue_in(url: str, conversation: str) -> str:
    with OpenAI(base_url=url + "/v1", api_key="k", max_retries=0) as client:
        return client.responses.create(
            model=MODEL, input="[[echo]]", conversation=conversation
        ).output_text


def test_generated_key_survives_a_restart_and_a_configured_key_wins(
    fake_upstream: str, tmp_path: Path
) -> None:
    database = tmp_path / "stateway.db"
    args = ["--upstream", fake_upstream, "--database", f"sqlite:///{database}"]
    with start_gateway(args) as url:
        item = compact(url)
        conversation = converse(url, item)
    with sqlite3.connect(database) as db:
        [(name, stored)] = db.execute("SELECT name, value FROM gateway_secrets").fetchall()
    assert name == "sealing_key"
    assert len(base64.b64decode(stored)) == 32

    with start_gateway(args) as url:  # the same database: the same key
        assert "user: keep this" in continue_from(url, item)

    other = base64.b64encode(bytes(range(32))).decode()
    with start_gateway(args, env={"STATEWAY_SEALING_KEY": other}) as url:
        with pytest.raises(openai.BadRequestError) as refused:
            continue_from(url, item)
        assert refused.value.code == "invalid_encrypted_content"
        with pytest.raises(openai.BadRequestError) as named:  # added under the other key
            continue_in(url, conversation)
        assert named.value.code == "invalid_encrypted_content"
        assert named.value.body["param"] == "conversation"  # type: ignore[index]
        sealed_here = compact(url)
    with start_gateway(args, env={"STATEWAY_SEALING_KEY": other}) as url:
        assert "user: keep this" in continue_from(url, sealed_here)
    with sqlite3.connect(database) as db:  # the stored key was left alone
        assert db.execute("SELECT value FROM gateway_secrets").fetchall() == [(stored,)]
