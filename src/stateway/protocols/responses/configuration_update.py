"""The ``configuration_update`` input item (the Responses API's, in beta): ``reasoning``
with an ``effort``, ``text`` with a ``format``, or both. Checked here, each error naming its
path; applied to the response's settings by :mod:`stateway.core.configuration_updates`."""

from __future__ import annotations

from typing import Any

from stateway.core.errors import InvalidRequest
from stateway.core.items import Item
from stateway.protocols.responses.request import REASONING_EFFORTS
from stateway.protocols.responses.text_format import decode_text_format
from stateway.protocols.validation import supported_values, wrong_type


def check_configuration_update(raw: dict[str, Any], path: str) -> Item:
    """The item, its ``text.format`` normalized as a request's is."""
    item = dict(raw)
    reasoning = raw.get("reasoning")
    if reasoning is not None:
        _object(reasoning, f"{path}.reasoning")
        effort = reasoning.get("effort")
        if effort is not None and effort not in REASONING_EFFORTS:
            raise InvalidRequest(
                f"Invalid value for '{path}.reasoning.effort': '{effort}'. Supported values "
                f"are: {supported_values(REASONING_EFFORTS)}.",
                param=f"{path}.reasoning.effort",
                code="invalid_value",
            )
    text = raw.get("text")
    if text is not None:
        _object(text, f"{path}.text")
        if text.get("format") is not None:
            _object(text["format"], f"{path}.text.format")
            try:
                fmt = decode_text_format(text["format"])
            except InvalidRequest as refused:  # its param is a request's: this item's path
                param = f"{path}.{refused.param}" if refused.param else None
                raise InvalidRequest(str(refused), param=param, code=refused.code) from None
            item["text"] = {**text, "format": fmt}
    return item


def _object(value: object, path: str) -> None:
    if not isinstance(value, dict):
        raise wrong_type(path, "an object", value)
