"""Models in Anthropic's shape: ``GET /v1/models`` (a page, by ``limit``, ``after_id``
or ``before_id``) and ``GET /v1/models/{model_id}``, for a client that sends
``anthropic-version``.

A page follows the listing's order. ``limit`` defaults to 20 and ranges from 1 to 1,000;
``after_id`` returns the models after that one, ``before_id`` those just before it; a
cursor that names no listed model, or both cursors at once, is a 400 naming the
parameter. Release dates are not known: ``created_at`` is the epoch, as Anthropic's
reference allows. ``max_input_tokens`` is the context window of the model's route (its
candidates' largest ``context_window``, once each declares one), null when unknown;
``max_tokens`` is null (no maximum of output tokens is configured). What else the
configuration does not know is left out (``capabilities``, ``line``), as the SDK's
``ModelInfo`` allows.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from stateway.core.errors import InvalidRequest
from stateway.core.routing.route import ListedModel

EPOCH: Final = "1970-01-01T00:00:00Z"
DEFAULT_LIMIT: Final = 20
MAX_LIMIT: Final = 1000


def model_info(model: ListedModel) -> dict[str, Any]:
    """One model, as ``GET /v1/models/{model_id}`` answers it (and each page entry)."""
    return {
        "type": "model",
        "id": model.name,
        "display_name": model.name,
        "created_at": EPOCH,
        "lifecycle": "active",
        "max_input_tokens": model.context_window,
        "max_tokens": None,
    }


def model_page(models: Sequence[ListedModel], query: Mapping[str, str]) -> dict[str, Any]:
    """The page of ``models`` that ``query`` (the request's query parameters) asks for."""
    limit = _limit(query.get("limit"))
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise InvalidRequest("Specify at most one of 'after_id' and 'before_id'.", param="after_id")
    if after is not None:
        start = _position(models, after, "after_id") + 1
        end = start + limit
        page, has_more = models[start:end], end < len(models)
    elif before is not None:
        end = _position(models, before, "before_id")
        start = max(0, end - limit)
        page, has_more = models[start:end], start > 0
    else:
        page, has_more = models[:limit], limit < len(models)
    data = [model_info(model) for model in page]
    return {
        "data": data,
        "has_more": has_more,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
    }


def _limit(given: str | None) -> int:
    if given is None:
        return DEFAULT_LIMIT
    try:
        limit = int(given)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(
            f"limit: Input should be an integer from 1 to {MAX_LIMIT}.", param="limit"
        )
    return limit


def _position(models: Sequence[ListedModel], cursor: str, param: str) -> int:
    for position, model in enumerate(models):
        if model.name == cursor:
            return position
    raise InvalidRequest(f"{param}: no model with id '{cursor}'.", param=param)
