"""A translated request's errors, in the names of the fields a Chat client sent.

Once a Chat request is translated, the core and the backends judge its canonical form,
and their errors name the Responses field at fault: ``input``, ``input[3].content[1].type``,
``reasoning``. :func:`chat_param` names the Chat field instead where one means the same
(``input`` is ``messages``, ``reasoning`` is ``reasoning_effort``, ``max_output_tokens``
is ``max_completion_tokens`` or ``max_tokens``; a field of one name in both, such as
``tools``, stays), and only when the client sent it (the core also judges
what the gateway added: a backend's ``gateway_tools``, defaults). An item's place
(``input[N]...``) is not mapped back to a message: one message becomes several items, or
none, and a stage may add or drop items before they are judged, so no count over the
messages is sure to name the right one; ``param`` is then null, and the message still
says what is at fault. Errors raised while decoding already name Chat's fields.

:func:`chat_error` is the error body: such a param, and, for a web search asked for with
``web_search_options`` where the gateway has no search provider, Chat's own words (the
core's offer a declaration only the Responses API has).
"""

from __future__ import annotations

from collections.abc import Container
from typing import Any, Final

from stateway.core.errors import GatewayError, NoSearchProvider

_RENAMED: Final = {
    "input": ("messages",),
    "reasoning": ("reasoning_effort",),
    "max_output_tokens": ("max_completion_tokens", "max_tokens"),
}
"""A Responses field -> the Chat fields meaning the same, the one that wins first (as
:mod:`.decode` reads ``max_completion_tokens`` before ``max_tokens``)."""

_NO_SEARCH_PROVIDER: Final = (
    "'web_search_options' asks for a web search, which needs a web search provider, and "
    "this gateway has none configured: set STATEWAY_WEB_SEARCH_PROVIDER (searxng, brave or "
    "tavily) where it runs, or leave 'web_search_options' out."
)


def chat_error(error: GatewayError, sent: Container[str]) -> dict[str, Any]:
    """``error``'s body (the OpenAI shape's ``error`` object), its param a field the
    client sent (``sent``: the body's top-level fields), or null."""
    wire = error.to_dict()
    if isinstance(error, NoSearchProvider) and "web_search_options" in sent:
        wire.update(message=_NO_SEARCH_PROVIDER, param="web_search_options")
        return wire
    wire["param"] = chat_param(error.param, sent)
    return wire


def chat_param(param: str | None, sent: Container[str]) -> str | None:
    """The Chat field ``param`` (a Responses field) stands for, if the client sent it
    (``sent``: the body's top-level fields), else None."""
    if param is None:
        return None
    return next((name for name in _RENAMED.get(param, (param,)) if name in sent), None)
