"""A body's validation error in the hosted API's own words and codes: a value out of its
bounds or of the wrong JSON type, named as the wire names the field."""

from __future__ import annotations

from typing import Any, Literal

import pydantic
import pytest

from stateway.core.errors import InvalidRequest
from stateway.protocols import validation
from stateway.protocols.responses.body import param_of


class Inner(pydantic.BaseModel):
    name: str = pydantic.Field(min_length=1)


class Body(pydantic.BaseModel):
    model: str = pydantic.Field(min_length=1)
    label: str | None = pydantic.Field(default=None, max_length=8)
    tags: list[str] | None = pydantic.Field(default=None, min_length=1, max_length=2)
    pair: list[str] | None = pydantic.Field(default=None, min_length=2)
    word: str | None = pydantic.Field(default=None, min_length=2)
    count: int | None = pydantic.Field(default=None, ge=1, le=20)
    ratio: float | None = pydantic.Field(default=None, ge=0, le=2)
    share: float | None = pydantic.Field(default=None, gt=0, lt=0.5)
    flag: bool | None = None
    inner: Inner | None = None
    items: list[Inner] | None = None
    input: str | list[dict[str, Any]] | None = None
    mode: Literal["auto", "disabled"] | None = None
    tier: Literal["auto", "default", "flex"] | None = None


def refusal(fields: dict[str, Any]) -> InvalidRequest:
    try:
        Body.model_validate({"model": "m", **fields}, strict=True)
    except pydantic.ValidationError as exc:
        return validation.invalid_request(exc, param_of)
    raise AssertionError("validated")


@pytest.mark.parametrize(
    ("fields", "param", "code", "message"),
    [
        (
            {"label": "x" * 9},
            "label",
            "string_above_max_length",
            "Invalid 'label': string too long. Expected a string with maximum length 8, but got "
            "a string with length 9 instead.",
        ),
        (
            {"model": ""},
            "model",
            "empty_string",
            "Invalid 'model': empty string. Expected a string with minimum length 1, but got an "
            "empty string instead.",
        ),
        (
            {"items": [{"name": ""}]},
            "items[0].name",
            "empty_string",
            "Invalid 'items[0].name': empty string. Expected a string with minimum length 1, but "
            "got an empty string instead.",
        ),
        (
            {"tags": ["a", "b", "c"]},
            "tags",
            "array_above_max_length",
            "Invalid 'tags': array too long. Expected an array with maximum length 2, but got an "
            "array with length 3 instead.",
        ),
        (
            {"tags": []},
            "tags",
            "empty_array",
            "Invalid 'tags': empty array. Expected an array with minimum length 1, but got an "
            "empty array instead.",
        ),
        (  # empty, whatever the minimum
            {"pair": []},
            "pair",
            "empty_array",
            "Invalid 'pair': empty array. Expected an array with minimum length 2, but got an "
            "empty array instead.",
        ),
        (
            {"word": ""},
            "word",
            "empty_string",
            "Invalid 'word': empty string. Expected a string with minimum length 2, but got an "
            "empty string instead.",
        ),
        (
            {"count": 0},
            "count",
            "integer_below_min_value",
            "Invalid 'count': integer below minimum value. Expected a value >= 1, but got 0 "
            "instead.",
        ),
        (
            {"count": 21},
            "count",
            "integer_above_max_value",
            "Invalid 'count': integer above maximum value. Expected a value <= 20, but got 21 "
            "instead.",
        ),
        (
            {"ratio": -2.5},
            "ratio",
            "decimal_below_min_value",
            "Invalid 'ratio': decimal below minimum value. Expected a value >= 0, but got -2.5 "
            "instead.",
        ),
        (
            {"ratio": 200},
            "ratio",
            "decimal_above_max_value",
            "Invalid 'ratio': decimal above maximum value. Expected a value <= 2, but got 200 "
            "instead.",
        ),
        (
            {"share": 0},
            "share",
            "decimal_below_min_value",
            "Invalid 'share': decimal below minimum value. Expected a value > 0, but got 0 "
            "instead.",
        ),
        (
            {"share": 0.5},
            "share",
            "decimal_above_max_value",
            "Invalid 'share': decimal above maximum value. Expected a value < 0.5, but got 0.5 "
            "instead.",
        ),
    ],
)
def test_a_value_out_of_its_bounds_is_refused_in_hosted_words(
    fields: dict[str, Any], param: str, code: str, message: str
) -> None:
    error = refusal(fields)
    assert error.to_dict() == {
        "message": message,
        "type": "invalid_request_error",
        "param": param,
        "code": code,
    }


@pytest.mark.parametrize(
    ("fields", "param", "expected", "got"),
    [
        ({"model": 5}, "model", "a string", "an integer"),
        ({"model": None}, "model", "a string", "null"),
        ({"label": ["x"]}, "label", "a string", "an array"),
        ({"count": "2"}, "count", "an integer", "a string"),
        ({"count": 1.5}, "count", "an integer", "a decimal number"),
        ({"count": True}, "count", "an integer", "a boolean"),
        ({"ratio": "warm"}, "ratio", "a decimal", "a string"),
        ({"flag": "yes"}, "flag", "a boolean", "a string"),
        ({"tags": {}}, "tags", "an array", "an object"),
        ({"inner": "x"}, "inner", "an object", "a string"),
        ({"items": [7]}, "items[0]", "an object", "an integer"),
        ({"input": [7]}, "input[0]", "an object", "an integer"),
    ],
)
def test_a_value_of_the_wrong_type_is_refused_in_hosted_words(
    fields: dict[str, Any], param: str, expected: str, got: str
) -> None:
    error = refusal(fields)
    assert (error.param, error.code) == (param, "invalid_type")
    assert (
        error.message == f"Invalid type for '{param}': expected {expected}, but got {got} instead."
    )


@pytest.mark.parametrize(
    ("fields", "param", "code", "message"),
    [
        (
            {"mode": "bogus"},
            "mode",
            "invalid_value",
            "Invalid value: 'bogus'. Supported values are: 'auto' and 'disabled'.",
        ),
        (  # not taken for an empty string of a field with a minimum length
            {"mode": ""},
            "mode",
            "invalid_value",
            "Invalid value: ''. Supported values are: 'auto' and 'disabled'.",
        ),
        (
            {"tier": "bogus"},
            "tier",
            "invalid_value",
            "Invalid value: 'bogus'. Supported values are: 'auto', 'default', and 'flex'.",
        ),
        (
            {"mode": {"a": 1}},
            "mode",
            "invalid_type",
            "Invalid type for 'mode': expected one of 'auto' or 'disabled', but got an object "
            "instead.",
        ),
        (
            {"tier": 7},
            "tier",
            "invalid_type",
            "Invalid type for 'tier': expected one of 'auto', 'default', or 'flex', but got an "
            "integer instead.",
        ),
    ],
)
def test_a_value_no_one_of_a_fields_values_is_refused_in_hosted_words(
    fields: dict[str, Any], param: str, code: str, message: str
) -> None:
    """As hosted refuses ``truncation: "bogus"`` or ``reasoning.summary: {}``."""
    error = refusal(fields)
    assert (error.param, error.code, error.message) == (param, code, message)


def test_a_value_every_alternative_of_a_union_refuses_names_no_one_type() -> None:
    """``input`` takes a string or an array: saying it expected a string would mislead."""
    error = refusal({"input": 7})
    assert (error.param, error.code) == ("input", "invalid_type")
    assert "expected a string" not in error.message


def test_a_field_the_decoders_check_themselves_is_empty_below_one() -> None:
    """A Chat message's ``content``, a conversation's ``items``, the ``model``."""
    assert validation.empty_array("items").message == (
        "Invalid 'items': empty array. Expected an array with minimum length 1, but got an "
        "empty array instead."
    )
    assert validation.empty_string("model").message.endswith(
        "Expected a string with minimum length 1, but got an empty string instead."
    )


def test_a_bound_hosted_has_no_known_words_for_keeps_pydantics() -> None:
    """An array shorter than a minimum above one: not guessed at."""
    error = refusal({"pair": ["a"]})
    assert (error.param, error.code) == ("pair", "invalid_value")
    assert error.message.startswith("Invalid value for 'pair': ")


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (
            {},
            {
                "message": "Missing required parameter: 'model'.",
                "type": "invalid_request_error",
                "param": "model",
                "code": "missing_required_parameter",
            },
        ),
        (
            [],
            {
                "message": "The request body must be a JSON object.",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_type",
            },
        ),
    ],
)
def test_a_missing_field_and_a_body_that_is_no_object_are_as_before(
    body: Any, error: dict[str, Any]
) -> None:
    with pytest.raises(pydantic.ValidationError) as caught:
        Body.model_validate(body, strict=True)
    assert validation.invalid_request(caught.value, param_of).to_dict() == error
