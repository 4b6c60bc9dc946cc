"""Capability negotiation: what a request needs, and whether a candidate can give it.

Checked per candidate before it is opened, so no upstream is sent a request it cannot
serve: image and file inputs, reasoning, tool calls (and parallel ones: a request that
allows them, as by default, is served by a candidate without them only when no other
candidate of the route can serve it, one call per round), the content part types its API
carries (:func:`stateway.core.context.uncarried`), and the context window when the
candidate's configuration declares one (the input estimated,
:mod:`stateway.core.token_estimate`; not with ``truncation: "auto"``, whose context the
gateway fits to the window, nor for a request that compacts first, a
``compaction_trigger`` or a ``context_management`` compaction: its summary call is fitted
to the window, and what follows it is compacted). A window learned from the model server
(:mod:`stateway.core.routing.windows`) is not checked so: the estimate, four bytes of
JSON a token, can overshoot a code-heavy context by a third, and the server counts
exactly, refusing what does not fit with an error that fails over as this check would.

Tools and input items of types the gateway does not model are no need a route refuses:
a candidate whose upstream speaks Responses natively is given them; any other's model is
not shown them (:mod:`stateway.core.planning`), so such a candidate serves a request
holding them only when none of the first kind can (``withholding``). What is not sent
asks nothing of such a candidate: its window is checked against the estimate of what its
model is shown, a screenshot of a ``computer_call_output`` needs no image input of it, and
tools it is not offered need no tool calls of it. But a ``tool_choice`` forcing a call
of them alone (``required`` where they are all the request's tools, a choice naming one,
an ``allowed_tools`` choice of mode ``required`` allowing only them) asks what such a
candidate cannot give: it cannot serve, and a route none of whose candidates carries
them answers a 400 on ``tool_choice`` (:func:`unmet`), as the hosted APIs
refuse a choice forcing a tool they are not given, instead of an answer in text
(:meth:`Needs._forced`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from stateway.core.backend import Backend
from stateway.core.commands import CreateResponse
from stateway.core.compaction.sealed import COMPACTION, COMPACTION_TRIGGER
from stateway.core.context import MODELLED_ITEM_TYPES, Prior, shown, uncarried, unshown_types
from stateway.core.errors import ContextTooLong, GatewayError, InvalidRequest
from stateway.core.items import MESSAGE, Item, is_screenshot
from stateway.core.routing.route import Candidate
from stateway.core.text_files import file_text
from stateway.core.token_estimate import estimate_context
from stateway.core.tools import client_hosted
from stateway.core.tools.choice import context_tools, names_tools
from stateway.core.tools.toolset import Toolset

_PART_HOLDERS = frozenset(
    {"function_call_output", "custom_tool_call_output", "computer_call_output"}
)

CAPABILITY_MISSING = "unsupported_capability"
"""The code of a 400 when no candidate of the route has a capability the request needs;
a context window large enough is :class:`~stateway.core.errors.ContextTooLong` instead
(``context_length_exceeded``, as an upstream refusing a too long prompt answers), which
``truncation: "auto"`` and token counts never get."""


def _unmodelled(kinds: list[str]) -> str:
    """Tools of ``kinds``, types the gateway does not model, in words."""
    named = ", ".join(f"'{kind}'" for kind in kinds)
    return (
        f"tool types the gateway does not model ({named}: offered only to an upstream "
        "speaking the Responses API)"
    )


@dataclass(slots=True)
class Needs:
    """What one request needs of the candidate that serves it."""

    command: CreateResponse
    prior: Prior
    images: bool = False
    native_images: bool = False
    """An image in an item of a type the gateway does not model (a
    ``computer_call_output``'s screenshot): sent only to an upstream speaking Responses."""
    files: bool = False
    other_files: bool = False
    """A file that is no text file (:mod:`stateway.core.text_files`): a backend giving
    text files as text (``inlines_text_files``) needs file input for these only."""
    reasoning: bool = False
    tool_calls: bool = False
    parallel_tool_calls: bool = False
    modelled_tools: bool = False
    """A tool of a type the gateway models is declared (or a tool search): all a
    candidate not carrying the others is offered (``tool_calls`` asks of the others)."""
    native_tools: bool = False
    """A tool only an upstream speaking Responses carries is declared (a type the gateway
    does not model)."""
    unmodelled_items: bool = False
    """An item of a type the gateway does not model is in the context: only then may a
    backend's model be left unshown one (:func:`~stateway.core.context.unshown_types`),
    which is looked for then only, the plain request paying no second walk."""
    forced_native: str | None = None
    """The call the ``tool_choice`` forces of tools only an upstream speaking Responses is
    offered, in words (:meth:`_forced`): no other candidate can make it."""
    client_hosted: bool = False
    """Shell or apply_patch tools are declared: natively for such an upstream, as
    functions for others (:mod:`stateway.core.tools.client_hosted`)."""
    counting: bool = False
    """Only the input is counted: no window refuses it (how many tokens it has is what
    tells a client whether it fits)."""
    _tokens: int | None = field(default=None, repr=False)
    _shown_tokens: int | None = field(default=None, repr=False)
    _native: frozenset[object] = field(default=frozenset(), repr=False)
    """The types of the tools only an upstream speaking Responses is offered."""

    @classmethod
    def of(
        cls, command: CreateResponse, prior: Prior, toolset: Toolset, *, counting: bool = False
    ) -> Needs:
        needs = cls(command, prior, counting=counting)
        for item in prior.items:
            needs._scan(item)
        for item in command.input:
            needs._scan(item)
        settings = command.settings
        effort = settings.reasoning_effort
        needs.reasoning = (effort is not None and effort != "none") or bool(
            settings.reasoning_budget
        )
        modelled = bool(toolset.client or toolset.gateway_owned)
        needs.modelled_tools = modelled or toolset.tool_search is not None
        needs.tool_calls = needs.modelled_tools or bool(toolset.native)
        needs.parallel_tool_calls = needs.tool_calls and settings.parallel_tool_calls
        needs.native_tools = bool(toolset.native)
        if toolset.native:
            needs._native = frozenset(tool.get("type") for tool in toolset.native)
            if names_tools(choice := settings.tool_choice):
                needs.forced_native = needs._forced(choice)
        hosted = client_hosted.TOOL_TYPES
        needs.client_hosted = any(t.get("type") in hosted for t in toolset.client)
        return needs

    def _forced(self, choice: str | dict[str, Any]) -> str | None:
        """The call ``choice`` forces of the request's tools of types the gateway does not
        model, where it can force no other, in words: ``required`` when they are all its
        tools (and its context offers none: ``additional_tools``, a tool search's output),
        a choice naming one by its type, an ``allowed_tools`` choice of mode ``required``
        allowing only them. None when the choice can be met without them."""
        native = self._native
        if choice == "required":
            if self.modelled_tools or self._offering():
                return None
            kinds = sorted(map(str, native))
            return f"tool_choice 'required' to force a call of {_unmodelled(kinds)}"
        if not isinstance(choice, dict) or "name" in choice:
            return None
        kind = choice.get("type")
        if kind != "allowed_tools":
            if kind not in native:
                return None
            return f"tool_choice '{kind}' to force a call of {_unmodelled([str(kind)])}"
        listed = choice.get("tools")
        if choice.get("mode") != "required" or not isinstance(listed, list) or not listed:
            return None
        for entry in listed:
            if not isinstance(entry, dict) or "name" in entry or entry.get("type") not in native:
                return None
        allowed = _unmodelled(list(dict.fromkeys(str(entry["type"]) for entry in listed)))
        return f"tool_choice 'allowed_tools' (mode 'required') to force a call of {allowed}"

    def _offering(self) -> bool:
        """Whether an item of the request's context offers tools (``additional_tools``, a
        tool search's output): what ``required`` may force beside the declared tools."""
        return bool(context_tools(self.prior.items) or context_tools(self.command.input))

    def _scan(self, item: Item) -> None:
        kind = item.get("type")
        if kind not in MODELLED_ITEM_TYPES:
            self.unmodelled_items = True
        if kind == MESSAGE:
            parts = item.get("content")
        elif kind in _PART_HOLDERS:
            parts = item.get("output")
            if kind not in MODELLED_ITEM_TYPES:  # its output is a screenshot
                self.native_images = self.native_images or is_screenshot(parts)
                return
            self.images = self.images or is_screenshot(parts)
        else:
            return
        if isinstance(parts, list):
            for part in parts:
                part_kind = part.get("type") if isinstance(part, dict) else None
                self.images = self.images or part_kind == "input_image"
                if part_kind == "input_file":
                    self.files = True
                    self.other_files = self.other_files or file_text(part) is None

    @property
    def compacts(self) -> bool:
        """Whether the request compacts its context first: a ``compaction_trigger`` (the
        last input item), or a ``context_management`` compaction (which a context over the
        window always reaches the threshold of, unless its own ``compact_threshold`` is
        higher: then the server refuses it)."""
        settings = self.command.settings
        last = self.command.input[-1] if self.command.input else None
        trigger = last is not None and last.get("type") == COMPACTION_TRIGGER
        return trigger or any(e.get("type") == COMPACTION for e in settings.context_management)

    @property
    def tokens(self) -> int:
        """The input's estimated tokens (computed once, when a candidate asks)."""
        if self._tokens is None:
            command = self.command
            items = self.prior.joined(command.input)
            self._tokens = estimate_context(command.instructions, items, command.settings.tools)
        return self._tokens

    def tokens_for(self, backend: Backend) -> int:
        """The estimated tokens of the input ``backend``'s model is shown: without the
        tools and items of types the gateway does not model, for a backend that does not
        carry them (the same for each such backend: none carries a type the gateway does
        not model); each estimate computed once."""
        if backend.carries_unknown_types or not (self.unmodelled_items or self._native):
            return self.tokens
        if self._shown_tokens is None:
            command = self.command
            items = self.prior.joined(command.input)
            seen = shown(items, backend)
            if len(seen) == len(items) and not self._native:
                self._shown_tokens = self.tokens
            else:
                tools = [t for t in command.settings.tools if t.get("type") not in self._native]
                self._shown_tokens = estimate_context(command.instructions, seen, tools)
        return self._shown_tokens


@dataclass(slots=True, frozen=True)
class Unmet:
    """Why a candidate cannot serve a request: the capability, and the client's error."""

    capability: str
    error: GatewayError


_UNMODELLED = InvalidRequest("A candidate that carries every type is preferred.")
"""Never raised: a candidate whose model would not be shown the request's tools or items
of types the gateway does not model serves when no other can (``withholding``)."""


def unmet(
    route: str,
    candidate: Candidate,
    needs: Needs,
    *,
    serial: bool = False,
    withholding: bool = False,
) -> Unmet | None:
    """The first thing ``candidate`` cannot do that ``needs`` asks; None when it can serve.
    ``serial``: the request would be served one call per round (parallel calls are not
    asked of it); ``withholding``: its model may be left unshown the tools and items of
    types the gateway does not model (see the module docstring)."""
    has, backend = candidate.capabilities, candidate.backend
    images = needs.images or (needs.native_images and backend.carries_unknown_types)
    if images and not has.images:
        return _unmet("images", route, candidate, "image input", "input")
    if _reads_files(candidate, needs) and not has.files:
        return _unmet("files", route, candidate, "file input", "input")
    if needs.reasoning and not has.reasoning:
        return _unmet("reasoning", route, candidate, "reasoning", "reasoning")
    if needs.forced_native is not None and not backend.carries_unknown_types:
        return _unmet("tool_choice", route, candidate, needs.forced_native, "tool_choice")
    calls = needs.tool_calls if backend.carries_unknown_types else needs.modelled_tools
    if calls and not has.tool_calls:
        return _unmet("tool_calls", route, candidate, "tool calls", "tools")
    if calls and needs.parallel_tool_calls and not serial and not has.parallel_tool_calls:
        what = "parallel tool calls"
        return _unmet("parallel_tool_calls", route, candidate, what, "parallel_tool_calls")
    window = has.context_window  # as configured: a learned one is the server's to check
    if window is not None and not _fitted(needs) and (tokens := needs.tokens_for(backend)) > window:
        what = f"a context window of about {tokens} tokens (it has {window})"
        message = _missing(route, candidate, what, "input").message
        # context_length_exceeded: what clients act on (Codex compacts)
        return Unmet("context_window", ContextTooLong(message, tokens=tokens, window=window))
    problem = uncarried(needs.prior, needs.command.input, backend)
    if problem is not None:
        return Unmet("input_types", problem)
    if not withholding and _withheld(needs, backend):
        return Unmet("unmodelled_types", _UNMODELLED)
    return None


def _withheld(needs: Needs, backend: Backend) -> bool:
    """Whether ``backend``'s model would not be shown a tool or an item of the request."""
    if backend.carries_unknown_types:
        return False
    if needs.native_tools:
        return True
    items = needs.command.input
    return needs.unmodelled_items and bool(
        unshown_types(needs.prior.items, backend) or unshown_types(items, backend)
    )


def _unmet(capability: str, route: str, candidate: Candidate, what: str, param: str) -> Unmet:
    return Unmet(capability, _missing(route, candidate, what, param))


def _missing(route: str, candidate: Candidate, what: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"No candidate of model '{route}' can serve this request: it needs {what}, which "
        f"backend '{candidate.backend.name}' (model '{candidate.model}') does not support.",
        param=param,
        code=CAPABILITY_MISSING,
    )


def _reads_files(candidate: Candidate, needs: Needs) -> bool:
    """Whether ``candidate``'s model is given files to read: any file, but for a backend
    giving text files as text (:mod:`stateway.core.text_files`), only other files."""
    if candidate.backend.inlines_text_files:
        return needs.other_files
    return needs.files


def _fitted(needs: Needs) -> bool:
    """Whether the gateway fits the request's context to the window itself (``truncation:
    "auto"``, or a compaction first), or only counts it."""
    return needs.command.settings.truncation == "auto" or needs.counting or needs.compacts
