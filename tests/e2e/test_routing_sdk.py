"""Routes over two fake upstreams through the real process, with the openai SDK:
failover before output, none after it, capability skips, aliases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from stateway.fake_upstream.launch import start_fake_upstream
from tests.e2e.configured import RunningGateway
from tests.e2e.routing import dead_url, fake_requests, routed_gateway, routes_file

IMAGE = (
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAC"
    "hwGA60e6kgAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def second_upstream() -> Iterator[str]:
    with start_fake_upstream() as url:
        yield url


@pytest.fixture(scope="module")
def routed(
    fake_upstream: str, second_upstream: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningGateway]:
    text = routes_file(fake_upstream, second_upstream, dead_url())
    with routed_gateway(tmp_path_factory.mktemp("routed"), text) as gateway:
        yield gateway


@pytest.fixture
def sdk(routed: RunningGateway) -> Iterator[OpenAI]:
    with OpenAI(base_url=routed.url + "/v1", api_key="x", max_retries=0) as client:
        yield client


def marker() -> str:
    return uuid.uuid4().hex[:12]


@pytest.mark.parametrize(
    ("status", "code"), [(500, "upstream_error"), (429, "rate_limit_exceeded")]
)
def test_a_500_or_429_before_output_fails_over_invisibly(
    sdk: OpenAI,
    routed: RunningGateway,
    fake_upstream: str,
    second_upstream: str,
    status: int,
    code: str,
) -> None:
    mark = marker()
    with sdk.responses.stream(
        model="assistant", input=f"{mark} [[error:{status}]] [[only:a-model]]"
    ) as stream:
        kinds = [event.type for event in stream]
        final = stream.get_final_response()
    assert kinds.count("response.created") == 1
    assert kinds[-1] == "response.completed"
    assert final.output_text == f"Hello! You said: {mark}"
    assert final.model == "assistant"
    assert len(fake_requests(fake_upstream, mark)) == 1
    [served] = fake_requests(second_upstream, mark)
    assert served["body"]["model"] == "b-model"
    attempts = routed.stored(final.id)["attempts"]
    assert [(x["backend"], x["outcome"]) for x in attempts] == [("a", "failed"), ("b", "ok")]
    assert attempts[0]["detail"] == code
    assert attempts[1]["first_byte_ms"] is not None
    public = sdk.responses.retrieve(final.id).model_dump()
    assert "attempts" not in public


def test_no_failover_after_output(
    sdk: OpenAI, routed: RunningGateway, fake_upstream: str, second_upstream: str
) -> None:
    mark = marker()
    with sdk.responses.stream(model="cutting", input=f"{mark} [[cut:4]] [[only:cut-model]]") as s:
        events = list(s)
    assert events[-1].type == "response.failed"
    assert [e.type for e in events].count("response.created") == 1
    response_id = events[-1].response.id
    assert len(fake_requests(fake_upstream, mark)) == 1
    assert fake_requests(second_upstream, mark) == []
    stored = routed.stored(response_id)
    assert stored["status"] == "failed"
    [attempt] = stored["attempts"]
    assert (attempt["backend"], attempt["outcome"]) == ("a", "cut")


def test_a_model_one_server_lacks_fails_over_without_opening_its_circuit(
    sdk: OpenAI, routed: RunningGateway, fake_upstream: str
) -> None:
    """A 404 (a served model name that does not match) moves on to the next candidate;
    the server is up, so more of them than the failure threshold leave it in rotation."""
    for _ in range(4):
        mark = marker()
        answer = sdk.responses.create(
            model="renamed", input=f"{mark} [[error:404]] [[only:renamed-model]]"
        )
        assert answer.output_text == f"Hello! You said: {mark}"
        assert len(fake_requests(fake_upstream, mark)) == 1
        attempts = routed.stored(answer.id)["attempts"]
        outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in attempts]
        assert outcomes == [("a", "failed", "model_not_found"), ("b", "ok", None)]


def test_when_no_candidate_has_the_model_the_client_gets_the_404(
    sdk: OpenAI, fake_upstream: str, second_upstream: str
) -> None:
    mark = marker()
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.responses.create(model="renamed", input=f"{mark} [[error:404]]")
    assert missing.value.code == "model_not_found"
    assert len(fake_requests(fake_upstream, mark)) == 1
    assert len(fake_requests(second_upstream, mark)) == 1


def test_connect_refused_fails_over(sdk: OpenAI, routed: RunningGateway) -> None:
    answer = sdk.responses.create(model="dead-first", input="hello")
    assert answer.output_text == "Hello! You said: hello"
    attempts = routed.stored(answer.id)["attempts"]
    outcomes = [(x["backend"], x["outcome"], x["detail"]) for x in attempts]
    assert outcomes == [("dead", "failed", "upstream_unavailable"), ("b", "ok", None)]


def test_an_image_skips_the_text_only_candidate(
    sdk: OpenAI, routed: RunningGateway, fake_upstream: str
) -> None:
    mark = marker()
    content = [
        {"type": "input_text", "text": mark},
        {"type": "input_image", "image_url": IMAGE},
    ]
    answer = sdk.responses.create(
        model="vision",
        input=[{"role": "user", "content": content}],  # type: ignore[typeddict-item]
    )
    assert answer.status == "completed"
    assert fake_requests(fake_upstream, mark) == []
    skip, served = routed.stored(answer.id)["attempts"]
    assert (skip["backend"], skip["outcome"], skip["detail"]) == ("a", "skipped", "images")
    assert (served["backend"], served["outcome"]) == ("b", "ok")


def test_no_capable_candidate_is_a_400_in_each_frontends_shape(sdk: OpenAI) -> None:
    content = [{"type": "input_image", "image_url": IMAGE}]
    with pytest.raises(openai.BadRequestError) as responses:
        sdk.responses.create(
            model="text-only",
            input=[{"role": "user", "content": content}],  # type: ignore[typeddict-item]
        )
    assert responses.value.code == "unsupported_capability"
    assert "image" in str(responses.value.message)
    with pytest.raises(openai.BadRequestError) as chat:
        sdk.chat.completions.create(
            model="text-only",
            messages=[
                {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE}}]}
            ],
        )
    assert "image" in str(chat.value.message)


def test_aliases_and_model_listing(sdk: OpenAI) -> None:
    answer = sdk.responses.create(model="smart", input="hi")
    assert answer.model == "smart"
    listed = {model.id: model.owned_by for model in sdk.models.list()}
    assert listed["assistant"] == "a"
    assert listed["smart"] == "a"
    assert listed["spread"] == "a"


def test_a_chain_keeps_to_the_candidate_that_served_it(sdk: OpenAI, routed: RunningGateway) -> None:
    def served(response_id: str) -> str:
        attempts = routed.stored(response_id)["attempts"]
        return str(next(x["backend"] for x in attempts if x["outcome"] == "ok"))

    first = sdk.responses.create(model="spread", input="turn 0")
    home = served(first.id)
    previous = first.id
    for index in range(1, 6):
        answer = sdk.responses.create(
            model="spread", input=f"turn {index}", previous_response_id=previous
        )
        assert served(answer.id) == home
        assert routed.stored(answer.id)["attempts"][0]["affinity"] == "hit"
        previous = answer.id
    starts = {served(sdk.responses.create(model="spread", input="new").id) for _ in range(24)}
    assert starts == {"a", "b"}


def test_shipped_stages_filter_tools_and_clamp_tokens(sdk: OpenAI, fake_upstream: str) -> None:
    mark = marker()
    tools = [
        {"type": "function", "name": name, "parameters": {"type": "object", "properties": {}}}
        for name in ("keep", "rm_rf")
    ]
    answer = sdk.responses.create(
        model="guarded",
        input=f"{mark} [[words:20]]",
        tools=tools,  # type: ignore[arg-type]
        max_output_tokens=100,
    )
    assert answer.status == "incomplete"  # clamped to 7 tokens
    assert [tool.name for tool in answer.tools] == ["keep"]  # type: ignore[union-attr]
    [sent] = fake_requests(fake_upstream, mark)
    assert [t["function"]["name"] for t in sent["body"]["tools"]] == ["keep"]
    assert sent["body"]["max_tokens"] == 7
