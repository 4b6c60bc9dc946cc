"""Route planning: names and aliases, tiers and weights (a seeded RNG), capabilities."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from stateway.core.commands import CreateResponse
from stateway.core.context import Prior
from stateway.core.errors import InvalidRequest, ModelNotFound
from stateway.core.generation_settings import GenerationSettings
from stateway.core.routing import BackendEntry, Needs, Router
from stateway.core.routing import router as router_module
from stateway.core.tools.history import REWRITTEN_ITEM_TYPES
from stateway.core.tools.toolset import Toolset
from tests.core.routing_fakes import Named, candidate, needs, route, router

TEXT = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}
IMAGE = {
    "type": "message",
    "role": "user",
    "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}],
}
SCREENSHOT = {
    "type": "computer_call_output",
    "call_id": "c1",
    "output": {"type": "computer_screenshot", "image_url": "data:image/png;base64,AAAA"},
}


def ask(*items: dict[str, object], **settings: object) -> CreateResponse:
    return CreateResponse("assistant", list(items), settings=GenerationSettings(**settings))  # type: ignore[arg-type]


def test_aliases_lead_to_routes_and_unknown_names_are_404() -> None:
    assistant = route(candidate(Named("a")))
    routing = router(assistant, aliases={"smart": "clever", "clever": "assistant"})
    assert routing.resolve("assistant") is assistant
    assert routing.resolve("smart") is assistant
    with pytest.raises(ModelNotFound):
        routing.resolve("other")


def test_a_default_route_serves_unknown_names() -> None:
    fallback = route(candidate(Named("a")), name="fallback")
    routing = router(fallback, default=fallback)
    assert routing.resolve("anything") is fallback


def test_weights_split_first_places_within_five_percent_over_2000_plans() -> None:
    a, b, c = Named("a"), Named("b"), Named("c")
    assistant = route(candidate(a, weight=3), candidate(b, weight=1), candidate(c, weight=1))
    routing = router(assistant, seed=2026)
    firsts = Counter(
        routing.plan(assistant, needs(ask(TEXT))).begin_round()[0].backend.name for _ in range(2000)
    )
    assert abs(firsts["a"] / 2000 - 0.6) <= 0.05
    assert abs(firsts["b"] / 2000 - 0.2) <= 0.05
    assert abs(firsts["c"] / 2000 - 0.2) <= 0.05


def test_lower_priority_tiers_come_first_and_max_attempts_bounds_a_round() -> None:
    a, b, c = Named("a"), Named("b"), Named("c")
    assistant = route(
        candidate(c, priority=2), candidate(b, priority=1), candidate(a), max_attempts=2
    )
    plan = router(assistant).plan(assistant, needs(ask(TEXT)))
    assert [x.backend.name for x in plan.order()] == ["a", "b", "c"]
    assert [x.backend.name for x in plan.begin_round()] == ["a", "b"]


def test_an_incapable_candidate_is_skipped_and_recorded() -> None:
    text_only, vision = Named("text"), Named("vision")
    assistant = route(candidate(text_only, images=False), candidate(vision))
    plan = router(assistant).plan(assistant, needs(ask(IMAGE)))
    assert [x.backend.name for x in plan.capable] == ["vision"]
    [skip] = plan.records
    assert (skip["backend"], skip["outcome"], skip["detail"]) == ("text", "skipped", "images")
    text_plan = router(assistant).plan(assistant, needs(ask(TEXT)))
    assert len(text_plan.capable) == 2
    assert text_plan.records == []


FILE_PARTS = frozenset({"input_text", "input_file"})


def _file(media_type: str) -> dict[str, object]:
    data = f"data:{media_type};base64,VGVh"
    return {
        "type": "message",
        "role": "user",
        "content": [{"type": "input_file", "file_data": data}],
    }


def test_a_text_file_needs_no_file_input_of_a_backend_giving_it_as_text() -> None:
    """A candidate without file input takes a text file when its backend gives it as text
    (a Chat one: :mod:`stateway.core.text_files`), never a PDF; one passing files on as
    they are (a Responses one) takes neither."""
    chat, passing, reader = Named("chat"), Named("passing"), Named("reader")
    chat.inlines_text_files = True
    for files in (passing, reader):
        files.carried_part_types = {**files.carried_part_types, "user": FILE_PARTS}
    assistant = route(
        candidate(chat, files=False), candidate(passing, files=False), candidate(reader)
    )
    text_plan = router(assistant).plan(assistant, needs(ask(_file("text/plain"))))
    assert [x.backend.name for x in text_plan.capable] == ["chat", "reader"]
    pdf_plan = router(assistant).plan(assistant, needs(ask(TEXT, _file("application/pdf"))))
    assert [x.backend.name for x in pdf_plan.capable] == ["reader"]
    both = needs(ask(_file("text/plain"), _file("application/pdf")))
    assert [x.backend.name for x in router(assistant).plan(assistant, both).capable] == ["reader"]


@pytest.mark.parametrize(
    ("can", "command", "words"),
    [
        ({"images": False}, ask(IMAGE), "image input"),
        ({"reasoning": False}, ask(TEXT, reasoning_effort="high"), "reasoning"),
        (
            {"tool_calls": False},
            ask(TEXT, tools=[{"type": "function", "name": "f", "parameters": {}}]),
            "tool calls",
        ),
        ({"context_window": 4}, ask(TEXT), "context window"),
    ],
)
def test_no_capable_candidate_is_a_400_naming_the_capability(
    can: dict[str, object], command: CreateResponse, words: str
) -> None:
    assistant = route(candidate(Named("a"), **can), candidate(Named("b"), **can))
    with pytest.raises(InvalidRequest) as refused:
        router(assistant).plan(assistant, needs(command))
    assert refused.value.status == 400
    # a context too long for every window is what clients know as context_length_exceeded
    expected = "context_length_exceeded" if "context_window" in can else "unsupported_capability"
    assert refused.value.code == expected
    assert words in refused.value.message
    assert "'assistant'" in refused.value.message


FUNCTION = {"type": "function", "name": "f", "parameters": {}}


def test_parallel_calls_allowed_prefer_the_candidates_that_make_them() -> None:
    serial, parallel = Named("serial"), Named("parallel")
    assistant = route(candidate(serial, parallel_tool_calls=False), candidate(parallel))
    plan = router(assistant).plan(assistant, needs(ask(TEXT, tools=[FUNCTION])))
    assert [x.backend.name for x in plan.capable] == ["parallel"]
    [skip] = plan.records
    assert (skip["backend"], skip["detail"]) == ("serial", "parallel_tool_calls")
    single = router(assistant).plan(
        assistant, needs(ask(TEXT, tools=[FUNCTION], parallel_tool_calls=False))
    )
    assert len(single.capable) == 2


def test_parallel_calls_allowed_are_served_one_per_round_when_no_candidate_makes_them() -> None:
    """``parallel_tool_calls: true`` (the default) allows parallel calls, it does not ask
    for them: a route whose candidates make one call per round serves it so (each round's
    request says ``parallel_tool_calls: false``), instead of refusing every such request."""
    a, b = Named("a"), Named("b")
    assistant = route(
        candidate(a, parallel_tool_calls=False),
        candidate(b, parallel_tool_calls=False, images=False),
    )
    plan = router(assistant).plan(assistant, needs(ask(IMAGE, tools=[FUNCTION])))
    assert [x.backend.name for x in plan.capable] == ["a"]
    [skip] = plan.records
    assert (skip["backend"], skip["detail"]) == ("b", "images")  # not parallel calls
    small = route(candidate(b, parallel_tool_calls=False, context_window=4))
    with pytest.raises(InvalidRequest) as refused:  # what it lacks besides, checked after
        router(small).plan(small, needs(ask(TEXT, tools=[FUNCTION])))
    assert refused.value.code == "context_length_exceeded"


def test_a_request_within_every_capability_plans_all_candidates() -> None:
    settings = {"parallel_tool_calls": False, "reasoning_effort": "none"}
    command = ask(TEXT, tools=[{"type": "function", "name": "f", "parameters": {}}], **settings)
    assistant = route(
        candidate(Named("a"), parallel_tool_calls=False, reasoning=False, context_window=10_000)
    )
    assert len(router(assistant).plan(assistant, needs(command)).capable) == 1


def test_a_candidate_not_carrying_unknown_types_serves_a_request_holding_them() -> None:
    """Its model is not shown them (:mod:`stateway.core.planning`): no refusal."""
    assistant = route(candidate(Named("a")))
    plan = router(assistant).plan(assistant, needs(ask(ODD_ITEM, TEXT)))
    assert [x.backend.name for x in plan.capable] == ["a"]
    plan = router(assistant).plan(assistant, drawing(ask(TEXT)))
    assert [x.backend.name for x in plan.capable] == ["a"]


def test_the_catch_all_serves_each_name_with_its_own_route_made_once() -> None:
    backend = Named("a", [])
    catch_all = Router([BackendEntry(backend, {}, catch_all=True)])
    first = catch_all.resolve("some-model")
    assert (first.name, first.upstream_model) == ("some-model", "some-model")
    assert catch_all.resolve("some-model") is first
    other = catch_all.resolve("other-model")
    assert other.upstream_model == "other-model"
    assert other.backend is first.backend is backend


def test_the_least_budget_a_round_is_sent_is_what_every_capable_candidate_takes() -> None:
    """Any capable candidate may answer a round (failover), so a round's budget is held
    to the largest of their upstreams' least (hosted OpenAI's Responses API: 16)."""
    chat, hosted = Named("chat"), Named("hosted")
    hosted.min_output_tokens = 16
    alone = route(candidate(chat), name="alone")
    mixed = route(candidate(chat), candidate(hosted), name="mixed")
    routing = router(alone, mixed)
    assert routing.plan(alone, needs(ask(TEXT))).min_output_tokens == 1
    assert routing.plan(mixed, needs(ask(TEXT))).min_output_tokens == 16


ODD_ITEM = {"type": "image_generation_call", "id": "ig_1", "result": "x"}
IMAGE_TOOL = {"type": "image_generation"}


def drawing(command: CreateResponse) -> Needs:
    """``command``'s needs with a tool of a type the gateway does not model declared."""
    return Needs.of(command, Prior([]), Toolset([IMAGE_TOOL], [], native=[IMAGE_TOOL]))


def test_the_catch_all_remembers_a_bounded_number_of_names(monkeypatch: pytest.MonkeyPatch) -> None:
    """Clients choose the names: past ``_MAX_SERVED`` of them, each is served by a route
    made for its request, and none is kept."""
    monkeypatch.setattr(router_module, "_MAX_SERVED", 2)
    catch_all = Router([BackendEntry(Named("a", []), {}, catch_all=True)])
    kept = [catch_all.resolve(name) for name in ("one", "two")]
    assert all(catch_all.resolve(route.name) is route for route in kept)
    past = catch_all.resolve("three")
    assert past.upstream_model == "three"
    assert catch_all.resolve("three") is not past


class Native(Named):
    """A backend whose upstream speaks Responses natively."""

    carries_unknown_types = True


@pytest.mark.parametrize("tool", [{"type": "shell"}, {"type": "apply_patch"}])
def test_client_hosted_tools_keep_a_run_on_its_first_candidate_s_api_shape(
    tool: dict[str, object],
) -> None:
    """Such a tool goes natively to an upstream speaking Responses and as a function to the
    others: a run whose first candidate is one never falls over to the other shape."""
    chat, native, other = Named("chat"), Native("native"), Named("other")
    assistant = route(candidate(chat), candidate(native, priority=1), candidate(other, priority=2))
    plan = router(assistant).plan(assistant, needs(ask(TEXT, tools=[tool])))
    assert [x.backend.name for x in plan.capable] == ["chat", "other"]
    [skip] = plan.records
    assert (skip["backend"], skip["detail"]) == ("native", "tool_shapes")
    plain = router(assistant).plan(assistant, needs(ask(TEXT)))
    assert [x.backend.name for x in plain.capable] == ["chat", "native", "other"]


@pytest.mark.parametrize("holding", [needs, drawing])
def test_unknown_types_go_to_the_candidates_that_carry_them_when_one_can_serve(
    holding: Callable[[CreateResponse], Needs],
) -> None:
    """A candidate whose model would not be shown a declared tool or an item of a type
    the gateway does not model serves only when none that carries it can: then every
    candidate of the plan is one of those, so a failover never changes what is shown."""
    chat, native, other = Named("chat"), Native("native"), Named("other")
    assistant = route(candidate(chat), candidate(native, priority=1), candidate(other))
    plan = router(assistant).plan(assistant, holding(ask(ODD_ITEM, TEXT)))
    assert [x.backend.name for x in plan.capable] == ["native"]
    assert [(s["backend"], s["detail"]) for s in plan.records] == [
        ("chat", "unmodelled_types"),
        ("other", "unmodelled_types"),
    ]
    plan = router(assistant).plan(assistant, needs(ask(TEXT)))
    assert [x.backend.name for x in plan.capable] == ["chat", "native", "other"]
    blind = route(candidate(chat), candidate(native, images=False), candidate(other))
    plan = router(blind).plan(blind, holding(ask(ODD_ITEM, IMAGE)))  # native has no eyes
    assert [x.backend.name for x in plan.capable] == ["chat", "other"]
    assert [(s["backend"], s["detail"]) for s in plan.records] == [("native", "images")]


def test_what_a_model_is_not_shown_counts_toward_no_window_of_its_candidate() -> None:
    """An item of a type the gateway does not model is not sent to a candidate not
    carrying it (a hosted image generation's base64 ``result``, a history begun on hosted
    OpenAI): its window is not filled by it, while one that is sent the item is."""
    drawn = {**ODD_ITEM, "result": "A" * 40_000}
    chat, native = Named("chat"), Native("native")
    alone = route(candidate(chat, context_window=1_000))
    plan = router(alone).plan(alone, drawing(ask(drawn, TEXT)))
    assert [x.backend.name for x in plan.capable] == ["chat"]
    both = route(candidate(native, context_window=1_000), candidate(chat, context_window=1_000))
    plan = router(both).plan(both, drawing(ask(drawn, TEXT)))
    assert [x.backend.name for x in plan.capable] == ["chat"]
    assert [(s["backend"], s["detail"]) for s in plan.records] == [("native", "context_window")]
    sent = route(candidate(native, context_window=1_000))
    with pytest.raises(InvalidRequest) as refused:
        router(sent).plan(sent, drawing(ask(drawn, TEXT)))
    assert refused.value.code == "context_length_exceeded"


def test_a_screenshot_a_model_is_not_shown_needs_no_image_input_of_its_candidate() -> None:
    """A ``computer_call_output`` (a type the gateway does not model) reaches only an
    upstream speaking Responses: another candidate without image input serves it."""
    blind = route(candidate(Named("chat"), images=False))
    plan = router(blind).plan(blind, needs(ask(SCREENSHOT, TEXT)))
    assert [x.backend.name for x in plan.capable] == ["chat"]
    native = route(candidate(Native("native"), images=False))
    with pytest.raises(InvalidRequest) as refused:
        router(native).plan(native, needs(ask(SCREENSHOT, TEXT)))
    assert refused.value.code == "unsupported_capability"


def test_tools_a_model_is_not_offered_need_no_tool_calls_of_its_candidate() -> None:
    """Declared tools all of types the gateway does not model are offered only to an
    upstream speaking Responses: another candidate without tool calls serves them."""
    plain = route(candidate(Named("chat"), tool_calls=False, parallel_tool_calls=False))
    plan = router(plain).plan(plain, drawing(ask(TEXT)))
    assert [x.backend.name for x in plan.capable] == ["chat"]
    native = route(candidate(Native("native"), tool_calls=False, parallel_tool_calls=False))
    with pytest.raises(InvalidRequest) as refused:
        router(native).plan(native, drawing(ask(TEXT)))
    assert "tool calls" in refused.value.message


FUNCTION_TOOL = {"type": "function", "name": "f", "parameters": {"type": "object"}}
FORCED_NATIVE = [
    "required",
    {"type": "image_generation"},
    {"type": "allowed_tools", "mode": "required", "tools": [IMAGE_TOOL]},
]


def forcing(choice: object, *client: dict[str, object]) -> Needs:
    """:func:`drawing`'s needs (and ``client``'s tools), ``choice`` the tool choice."""
    command = ask(TEXT, tool_choice=choice, tools=[IMAGE_TOOL, *client])
    return Needs.of(command, Prior([]), Toolset([IMAGE_TOOL], list(client), native=[IMAGE_TOOL]))


@pytest.mark.parametrize("choice", FORCED_NATIVE)
def test_a_choice_forcing_only_unmodelled_tools_is_a_400_where_no_candidate_carries_them(
    choice: object,
) -> None:
    """``required`` with tools all of types the gateway does not model, a choice naming
    one, an ``allowed_tools`` choice of mode ``required`` allowing only them: a model not
    offered them cannot be forced to call them. A route with no candidate carrying them
    refuses the request (before anything goes upstream), on ``tool_choice``, naming why,
    instead of answering in text."""
    chat = route(candidate(Named("chat")))
    with pytest.raises(InvalidRequest) as refused:
        router(chat).plan(chat, forcing(choice))
    assert (refused.value.param, refused.value.code) == ("tool_choice", "unsupported_capability")
    assert "'image_generation'" in refused.value.message
    why = "('image_generation': offered only to an upstream speaking the Responses API)"
    assert refused.value.message.count(why) == 1
    assert "does not model" in refused.value.message
    assert "backend 'chat'" in refused.value.message
    assert "model 'assistant'" in refused.value.message


def test_required_forcing_several_unmodelled_types_names_each() -> None:
    code = {"type": "code_interpreter"}
    command = ask(TEXT, tool_choice="required", tools=[IMAGE_TOOL, code])
    needs = Needs.of(command, Prior([]), Toolset([IMAGE_TOOL, code], [], native=[IMAGE_TOOL, code]))
    chat = route(candidate(Named("chat")))
    with pytest.raises(InvalidRequest) as refused:
        router(chat).plan(chat, needs)
    assert "('code_interpreter', 'image_generation': offered only" in refused.value.message


@pytest.mark.parametrize("choice", FORCED_NATIVE)
def test_a_choice_forcing_only_unmodelled_tools_goes_to_a_candidate_carrying_them(
    choice: object,
) -> None:
    """Another candidate of the route that carries them (an upstream speaking Responses)
    serves it, whatever the route's order: nothing is refused that one could serve."""
    mixed = route(candidate(Named("chat")), candidate(Native("native"), priority=1))
    plan = router(mixed).plan(mixed, forcing(choice))
    assert [x.backend.name for x in plan.capable] == ["native"]
    assert [(s["backend"], s["detail"]) for s in plan.records] == [("chat", "tool_choice")]


@pytest.mark.parametrize(
    "choice",
    [
        "required",  # the function is forced
        "auto",
        {"type": "function", "name": "f"},
        {"type": "allowed_tools", "mode": "required", "tools": [IMAGE_TOOL, FUNCTION_TOOL]},
        {"type": "allowed_tools", "mode": "auto", "tools": [IMAGE_TOOL]},
        {"type": "allowed_tools", "mode": "required", "tools": []},
        {
            "type": "allowed_tools",
            "mode": "required",
            "tools": [IMAGE_TOOL, {"type": "web_search"}],
        },
        {"type": "allowed_tools", "mode": "required", "tools": ["image_generation"]},
        # named: a tool chosen by its name, not by its type
        {"type": "image_generation", "name": "x"},
        {"type": "allowed_tools", "mode": "required", "tools": [{**IMAGE_TOOL, "name": "x"}]},
    ],
)
def test_a_choice_a_model_can_meet_without_unmodelled_tools_is_served_by_any_candidate(
    choice: object,
) -> None:
    chat = route(candidate(Named("chat")))
    plan = router(chat).plan(chat, forcing(choice, FUNCTION_TOOL))
    assert [x.backend.name for x in plan.capable] == ["chat"]


def test_required_beside_tools_the_context_offers_is_served_by_any_candidate() -> None:
    """Tools an ``additional_tools`` item offers are offered to any model: ``required``
    may force one of them."""
    offered = {"type": "additional_tools", "tools": [FUNCTION_TOOL]}
    command = ask(offered, TEXT, tool_choice="required", tools=[IMAGE_TOOL])
    needs = Needs.of(command, Prior([]), Toolset([IMAGE_TOOL], [], native=[IMAGE_TOOL]))
    chat = route(candidate(Rewriting("chat")))
    assert [x.backend.name for x in router(chat).plan(chat, needs).capable] == ["chat"]


class Rewriting(Named):
    """A backend carrying the items the gateway rewrites for it (a Chat one)."""

    carried_item_types = Named.carried_item_types | REWRITTEN_ITEM_TYPES
