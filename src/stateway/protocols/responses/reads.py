"""The queries of the Responses reads: ``GET /v1/responses/{id}`` (the response, or its
event log streamed again) and ``GET /v1/responses/{id}/input_items`` (a page of its input
items); :func:`page_query` reads any item listing's page (conversations' too)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Final, Literal

from stateway.core.commands import GetResponse, ListInputItems, WatchResponse
from stateway.core.errors import InvalidRequest
from stateway.protocols.responses.include import read_include
from stateway.protocols.validation import out_of_range, unsupported_value, wrong_type

_MAX_SEQUENCE_NUMBER = 2**31 - 1
"""Sequence numbers are stored as 32-bit integers."""
_MIN_LIMIT, _MAX_LIMIT = 1, 100
"""A listing page's bounds."""
_INTEGER: Final = re.compile(r"-?[0-9]{1,1000}")
"""A ``limit`` read as an integer (a negative one is below the bound, not a wrong type)."""
_ORDERS: Final = ("asc", "desc")


def decode_retrieve(
    response_id: str, query: Mapping[str, str], include: Sequence[str] = ()
) -> GetResponse | WatchResponse:
    """``GET /v1/responses/{id}``: the response, its output as ``include`` (the query's
    ``include[]`` values) shows it, or with ``stream=true`` its event log from after
    ``starting_after`` (a sequence number, 0 or more), as it was streamed."""
    shown = read_include(include)
    if query.get("stream", "false").lower() not in ("true", "1"):
        return GetResponse(response_id, shown)
    text = query.get("starting_after")
    if text is None:
        return WatchResponse(response_id)
    digits = text.isascii() and text.isdigit() and len(text) <= 10
    if not digits or int(text) > _MAX_SEQUENCE_NUMBER:
        raise InvalidRequest(
            f"Invalid 'starting_after': '{text}'. Expected a sequence number (an integer, "
            "0 or more).",
            param="starting_after",
            code="invalid_value",
        )
    return WatchResponse(response_id, int(text))


def decode_list_input_items(
    response_id: str, query: Mapping[str, str], include: Sequence[str] | None = None
) -> ListInputItems:
    """A page of a response's input items (:func:`page_query`), shown with ``include``
    (the query's ``include[]`` values)."""
    shown = read_include(include)
    return ListInputItems(response_id, *page_query(query), shown)


def page_query(query: Mapping[str, str]) -> tuple[str | None, int, Literal["asc", "desc"]]:
    """A listing's ``after``, ``limit`` (1 to 100, default 20) and ``order`` (default
    ``desc``), as the item listings read them."""
    limit_text = query.get("limit", "20")
    if _INTEGER.fullmatch(limit_text) is None:  # a query's values are all strings
        raise wrong_type("limit", "an integer", limit_text)
    limit = int(limit_text)
    if not _MIN_LIMIT <= limit <= _MAX_LIMIT:  # as hosted words a bound
        bound, operator = (_MIN_LIMIT, ">=") if limit < _MIN_LIMIT else (_MAX_LIMIT, "<=")
        raise out_of_range("limit", limit, bound, operator, decimal=False)
    order = query.get("order", "desc")
    if order not in _ORDERS:
        raise unsupported_value("order", order, _ORDERS)
    sort: Literal["asc", "desc"] = "asc" if order == "asc" else "desc"
    return query.get("after") or None, limit, sort
