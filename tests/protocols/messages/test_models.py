"""Models in Anthropic's shape: one model, and pages by ``limit``, ``after_id`` and
``before_id``."""

from __future__ import annotations

import pytest

from stateway.core.errors import InvalidRequest
from stateway.core.routing.route import ListedModel
from stateway.protocols.messages.models import model_info, model_page

NAMES = ["a", "b", "c", "d", "e"]
MODELS = [ListedModel(name, "up") for name in NAMES]


def ids(page: dict[str, object]) -> list[str]:
    return [model["id"] for model in page["data"]]  # type: ignore[attr-defined]


def test_a_model() -> None:
    """Its limits null where unknown, as the SDK's ``ModelInfo`` allows: a window only when
    its route's candidates declare one, and no maximum of ``max_tokens`` (none is
    configured)."""
    assert model_info(ListedModel("a", "up")) == {
        "type": "model",
        "id": "a",
        "display_name": "a",
        "created_at": "1970-01-01T00:00:00Z",
        "lifecycle": "active",
        "max_input_tokens": None,
        "max_tokens": None,
    }


def test_a_model_s_declared_context_window_is_its_max_input_tokens() -> None:
    assert model_info(ListedModel("a", "up", 32768))["max_input_tokens"] == 32768


def test_the_first_page_holds_twenty_by_default() -> None:
    names = [f"m{i:02}" for i in range(25)]
    many = [ListedModel(name, "up") for name in names]
    page = model_page(many, {})
    assert ids(page) == names[:20]
    assert (page["has_more"], page["first_id"], page["last_id"]) == (True, "m00", "m19")
    assert model_page(many[:20], {})["has_more"] is False
    assert model_page([], {}) == {"data": [], "has_more": False, "first_id": None, "last_id": None}


@pytest.mark.parametrize(
    ("query", "expected", "more"),
    [
        ({"limit": "1"}, ["a"], True),
        ({"limit": "2"}, ["a", "b"], True),
        ({"limit": "5"}, NAMES, False),
        ({"limit": "1000"}, NAMES, False),
        ({"limit": "2", "after_id": "b"}, ["c", "d"], True),
        ({"limit": "2", "after_id": "c"}, ["d", "e"], False),
        ({"after_id": "e"}, [], False),
        ({"limit": "2", "before_id": "e"}, ["c", "d"], True),
        ({"limit": "2", "before_id": "c"}, ["a", "b"], False),
        ({"limit": "2", "before_id": "d"}, ["b", "c"], True),
        ({"before_id": "a"}, [], False),
    ],
)
def test_pages_by_cursor(query: dict[str, str], expected: list[str], more: bool) -> None:
    page = model_page(MODELS, query)
    assert ids(page) == expected
    assert page["has_more"] is more


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "1001"}, "limit"),
        ({"limit": "two"}, "limit"),
        ({"after_id": "zz"}, "after_id"),
        ({"before_id": "zz"}, "before_id"),
        ({"after_id": "a", "before_id": "c"}, "after_id"),
    ],
)
def test_bad_parameters_are_400s_naming_them(query: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        model_page(MODELS, query)
    assert caught.value.status == 400
    assert caught.value.param == param
    assert param in caught.value.message


def test_both_cursors_at_once_are_refused_in_words() -> None:
    with pytest.raises(InvalidRequest) as caught:
        model_page(MODELS, {"after_id": "a", "before_id": "c"})
    assert caught.value.message == "Specify at most one of 'after_id' and 'before_id'."
