"""Text documents and text files end to end: the real ``stateway serve`` in front of the
real fake upstream speaking each upstream shape, driven by the official ``anthropic`` SDK
(a plain-text ``document``) and ``openai`` SDK (an ``input_file`` of a text file). A Chat
Completions upstream, which takes no files, gets a text one as its text (its title, a
document's context, then its text, one a line: :mod:`stateway.core.text_files`); an
Anthropic upstream gets the document block, a Responses one the ``input_file``, as before.
A PDF, or a text file that is not UTF-8, is still refused by a Chat upstream."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest
from anthropic import Anthropic
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from stateway.launch import start_gateway
from tests.e2e.test_messages_sdk import clear, upstream_log

MODEL = "fake-model"
NOTES = "Tea at four.\nBring scones."


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="module", params=["chat", "anthropic", "responses"])
def upstream_api(request: pytest.FixtureRequest) -> str:
    api: str = request.param
    return api


@pytest.fixture(scope="module")
def gateway(
    upstream: str, upstream_api: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    database = f"sqlite:///{tmp_path_factory.mktemp('db') / 'stateway.db'}"
    args = ["--upstream", upstream, "--upstream-api", upstream_api, "--database", database]
    with start_gateway(args) as url:
        yield url


@pytest.fixture
def claude(gateway: str) -> Iterator[Anthropic]:
    with Anthropic(base_url=gateway, api_key="client-key", max_retries=0) as sdk:
        yield sdk


@pytest.fixture
def client(gateway: str) -> Iterator[OpenAI]:
    with OpenAI(base_url=gateway + "/v1", api_key="client-key", max_retries=0) as sdk:
        yield sdk


def encoded(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_plain_text_documents_reach_every_upstream(
    claude: Anthropic, upstream: str, upstream_api: str
) -> None:
    """A text source with its title and context, a content source, and a text document a
    tool returned."""
    titled: Any = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": NOTES},
        "title": "notes.txt",
        "context": "From the team wiki.",
    }
    content: Any = {
        "type": "document",
        "source": {"type": "content", "content": [{"type": "text", "text": "Room 4."}]},
    }
    read: Any = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    result: Any = {
        "type": "tool_result",
        "tool_use_id": "toolu_1",
        "content": [
            {"type": "text", "text": "Read it."},
            {
                "type": "document",
                "source": {"type": "text", "media_type": "text/plain", "data": "x=1"},
            },
        ],
    }
    messages: Any = [
        {"role": "user", "content": [{"type": "text", "text": "Read these. "}, titled, content]},
        {"role": "assistant", "content": [read]},
        {"role": "user", "content": [result]},
    ]
    clear(upstream)
    answer = claude.messages.create(model=MODEL, max_tokens=300, messages=messages)
    assert answer.stop_reason == "end_turn"
    assert answer.content[0].type == "text"
    [sent] = upstream_log(upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["messages"][0]["content"] == [
            {"type": "text", "text": "Read these. "},
            {"type": "text", "text": f"notes.txt\nFrom the team wiki.\n{NOTES}"},
            {"type": "text", "text": "Room 4."},
        ]
        assert body["messages"][2] == {
            "role": "tool",
            "tool_call_id": "toolu_1",
            "content": "Read it.\nx=1",
        }
    elif upstream_api == "anthropic":
        assert body["messages"] == messages
    else:
        assert [p["type"] for p in body["input"][0]["content"]] == [
            "input_text",
            "input_file",
            "input_file",
        ]
        titled_file = body["input"][0]["content"][1]
        assert titled_file["filename"] == "notes.txt"
        assert titled_file["file_data"] == f"data:text/plain;base64,{encoded(NOTES.encode())}"


def test_a_text_file_of_a_responses_client_reaches_every_upstream(
    client: OpenAI, upstream: str, upstream_api: str
) -> None:
    file_data = f"data:text/plain;base64,{encoded(NOTES.encode())}"
    part: Any = {"type": "input_file", "filename": "notes.txt", "file_data": file_data}
    asked: Any = [{"role": "user", "content": [{"type": "input_text", "text": "Read: "}, part]}]
    clear(upstream)
    response = client.responses.create(model=MODEL, input=asked)
    assert response.status == "completed"
    if upstream_api == "chat":
        assert response.output_text == f"Hello! You said: Read: notes.txt\n{NOTES}"
    [sent] = upstream_log(upstream)
    body = sent["body"]
    if upstream_api == "chat":
        assert body["messages"][0]["content"][1] == {"type": "text", "text": f"notes.txt\n{NOTES}"}
    elif upstream_api == "anthropic":
        document = body["messages"][0]["content"][1]
        assert document == {
            "type": "document",
            "source": {"type": "text", "media_type": "text/plain", "data": NOTES},
            "title": "notes.txt",
        }
    else:
        assert body["input"][0]["content"][1] == part


LATIN_1 = "café".encode("latin-1")
"""Not UTF-8: no Chat upstream is sent it as text."""


def test_a_text_file_that_is_not_utf8_is_refused_by_a_chat_upstream(
    claude: Anthropic, client: OpenAI, upstream_api: str
) -> None:
    document: Any = {
        "type": "document",
        "source": {"type": "base64", "media_type": "text/plain", "data": encoded(LATIN_1)},
    }
    messages: Any = [{"role": "user", "content": [{"type": "text", "text": "Read: "}, document]}]
    part: Any = {
        "type": "input_file",
        "filename": "a.txt",
        "file_data": f"data:text/plain;base64,{encoded(LATIN_1)}",
    }
    asked: Any = [{"role": "user", "content": [part]}]
    if upstream_api != "chat":  # carried as a file, as before
        assert claude.messages.create(model=MODEL, max_tokens=300, messages=messages).content
        assert client.responses.create(model=MODEL, input=asked).status == "completed"
        return
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=MODEL, max_tokens=300, messages=messages)
    said = refused.value.body["error"]["message"]  # type: ignore[index]
    assert said.startswith("messages.0.content.1.document: This model does not support document")
    with pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model=MODEL, input=asked)
    error: Any = caught.value.body
    assert (error["param"], error["code"]) == (
        "input[0].content[0].type",
        "unsupported_content_type",
    )
    assert "'input_file' in a 'user' message is not supported" in error["message"]


CLAUDE_CODE_MEDIA_PATH = re.compile(
    r"messages[.[](\d+)[\].]+content[.[](\d+)[\].]+(?:tool_result[.[]content[.[](\d+)[\].]+)?"
    r"(image|document|pdf)"
)
"""How Claude Code finds the block a 400 refuses (as ``tests/surfaces/http/test_messages``
has it): it leaves that block out and sends the request again."""


def test_a_pdf_after_a_text_document_is_the_block_a_chat_upstream_refuses(
    claude: Anthropic, upstream_api: str
) -> None:
    """Claude Code's Read of a PDF, in a tool result after a text document: the 400 it
    recovers from names the PDF, not the text document the upstream could take."""
    text = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "t"}}
    pdf = {
        "type": "document",
        "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0="},
    }
    read: Any = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}
    result: Any = {"type": "tool_result", "tool_use_id": "toolu_1", "content": [text, pdf]}
    messages: Any = [
        {"role": "user", "content": [text, {"type": "text", "text": "read it"}]},
        {"role": "assistant", "content": [read]},
        {"role": "user", "content": [result]},
    ]
    if upstream_api != "chat":
        assert claude.messages.create(model=MODEL, max_tokens=300, messages=messages).content
        return
    with pytest.raises(anthropic.BadRequestError) as refused:
        claude.messages.create(model=MODEL, max_tokens=300, messages=messages)
    said = refused.value.body["error"]["message"]  # type: ignore[index]
    assert said.startswith(
        "messages.2.content.0.tool_result.content.1.document: This model does not support PDF "
        "input: the upstream API of backend"
    )
    found = CLAUDE_CODE_MEDIA_PATH.search(said)
    assert found is not None
    assert found.groups() == ("2", "0", "1", "document")
