"""A context as the model sees it: sealed items opened, compacted turns replaced.

- A ``compaction`` item stands for everything before it: the model sees the ``system``,
  ``developer`` and ``user`` messages that precede the *last* compaction item of the
  context (the ones a client keeps, as ``/responses/compact`` returns them), then that
  item's summary as a ``user`` message (:data:`~.prompt.SUMMARY_PREFIX` first), then
  everything after it. Earlier compaction items were summarized into the last one. An
  item that also shows its summary (``content``, beside its seal: a Messages
  compaction) must show the one sealed (:func:`~.sealed.signed_summary`), and stands for
  the ``user`` messages before it too (its summary was asked for with the standalone
  prompt, :data:`~.prompt.STANDALONE_SUMMARY_PROMPT`: a Messages client sends it back in
  their place, and a Messages thread, which holds it for the client, shows it so too);
  one with a ``cache_control`` (the block's) has its summary marked with it. Tool
  outputs left without their call by this are left out too. ``additional_tools`` items
  are kept: their tools stay offered.
- A ``reasoning`` item whose ``encrypted_content`` this gateway sealed
  (:meth:`~stateway.core.ports.Sealer.owns`) holds either the reasoning text, and is shown
  with that text (not whatever text came along with it) without the blob, or an
  upstream's own seal sealed over for the tenant (:func:`~stateway.core.reasoning.wrapped`),
  and is shown with that seal as the upstream made it, for that upstream to check, and
  with the thinking text sealed with it (when it was: not before 2026-12-05), which the
  seal signs (clients send it back without its text, as they do to hosted OpenAI). An
  upstream's seal as it came (not sealed over) is taken only from stored items (ones
  stored before seals were sealed over): in the request's own input, where any tenant
  could send another's, it is left out (the item goes on as reasoning no upstream signed,
  as a client's history from elsewhere did before; a run stores its input so too:
  :func:`taken_input`), and among items added to a conversation it is a 400
  (:func:`check_added`, which verifies their other seals then, as the request's own
  input's are).
- A ``compaction_trigger`` is an instruction to the gateway, not context: left out.

A response's own output, in its later rounds, is sent without the seals the gateway put on
its reasoning, its upstream's own opened again (:func:`unsealed_output`).

Every sealed item of the request's own input is verified, used or not, so an altered one
is always a 400; items of a stored chain are opened only when used.
"""

from __future__ import annotations

from stateway.core.compaction import sealed
from stateway.core.compaction.prompt import SUMMARY_PREFIX
from stateway.core.items import MESSAGE, REASONING, Item
from stateway.core.ports import Sealer
from stateway.core.reasoning import REDACTED, unwrapped_thinking
from stateway.core.tools.tool_types import ADDITIONAL_TOOLS

_KEPT_ROLES = frozenset({"system", "developer", "user"})
_STANDALONE_KEPT_ROLES = frozenset({"system", "developer"})
ENCRYPTED = "encrypted_content"
SHOWN = "content"
"""A compaction item's summary in the clear, beside its seal (:attr:`~stateway.core.commands.
GenerationSettings.summary_shown`; a Messages ``compaction`` block's ``content``)."""
CACHE_CONTROL = "cache_control"
"""A compaction item's prompt-cache breakpoint (a Messages block's ``cache_control``),
which the summary shown in its place carries."""


def model_view(
    items: list[Item],
    tenant_id: str,
    sealer: Sealer | None,
    input_start: int,
    prior: str = "previous_response_id",
) -> list[Item]:
    """``items`` (the stored items continued, then the request's input from
    ``input_start``) as the model sees them; the items themselves are never changed.
    ``prior``: the parameter that named the stored items, which an error about one names
    (``previous_response_id`` or ``conversation``)."""
    if not any(_needs_view(item, sealer) for item in items):
        return items
    last = max(
        (i for i, item in enumerate(items) if item.get("type") == sealed.COMPACTION), default=-1
    )
    roles = _STANDALONE_KEPT_ROLES if last >= 0 and standalone(items[last]) else _KEPT_ROLES
    out: list[Item] = []
    dropped_calls: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type")
        param = prior if index < input_start else f"input[{index - input_start}].{ENCRYPTED}"
        if kind == sealed.COMPACTION_TRIGGER:
            continue
        if kind == sealed.COMPACTION:
            if index == last or index >= input_start:
                text = _summary(item, tenant_id, sealer, param)
                if index == last:
                    out.append(summary_message(text, item.get("id"), item.get(CACHE_CONTROL)))
            continue
        if index < last and not _kept(item, roles):
            if index >= input_start and _carries_seal(item, sealer):
                _opened_reasoning(item, tenant_id, sealer, param, given=True)
            call_id = item.get("call_id")
            if isinstance(call_id, str):
                dropped_calls.add(call_id)
            continue
        if index > last and item.get("call_id") in dropped_calls:
            continue
        if _carries_seal(item, sealer):
            out.append(_opened_reasoning(item, tenant_id, sealer, param, index >= input_start))
        else:
            out.append(item)
    return out


def unsealed_output(items: list[Item], sealer: Sealer | None, tenant_id: str) -> list[Item]:
    """A response's own output as its next round sends it: reasoning the gateway sealed
    for its client goes without the seal (its text is there) — a seal is for the client
    to send back, never for an upstream to check — and an upstream's own seal, sealed
    over for the client, as the upstream made it."""
    if not any(_carries_seal(item, sealer) for item in items):
        return items
    return [
        _opened_reasoning(item, tenant_id, sealer, "output", False)
        if _carries_seal(item, sealer)
        else item
        for item in items
    ]


def taken_input(items: list[Item], sealer: Sealer | None) -> list[Item]:
    """A request's input as a run takes it, sends it on and stores it: an upstream's seal
    as it came left out, as the view leaves it out, so that it is not taken later as a
    stored item of the chain, conversation or WebSocket checkpoint it joins."""
    for item in items:  # a loop, not any(): this runs for every request
        if item.get("type") == REASONING and _as_it_came(item, sealer):
            break
    else:
        return items
    return [_without_seal(item) if _as_it_came(item, sealer) else item for item in items]


def check_added(items: list[Item], tenant_id: str, sealer: Sealer | None) -> None:
    """Items a client adds to a conversation (``items[i]``), stored as sent, so verified
    now as the request's own input is (or a forged seal would be stored, and refused only
    once a turn uses it): a compaction item's seal, and a reasoning item's the gateway
    made, must open for ``tenant_id``; an upstream's seal as it came is refused there too,
    or it would be taken as stored. A 400 names the first item at fault."""
    for index, item in enumerate(items):
        param = f"items[{index}].{ENCRYPTED}"
        if item.get("type") == sealed.COMPACTION:
            sealed.unseal(sealer, sealed.COMPACTION, tenant_id, item.get(ENCRYPTED), param)
        elif _as_it_came(item, sealer):
            raise sealed.invalid(REASONING, param)
        elif _carries_seal(item, sealer):
            assert sealer is not None
            _opened_reasoning(item, tenant_id, sealer, param, given=False)


def summary_message(summary: str, item_id: object = None, cache_control: object = None) -> Item:
    """How the model is shown a compaction item's summary; the item's ``cache_control``
    (a Messages block's prompt-cache breakpoint) marks it, as it would the block."""
    part: Item = {"type": "input_text", "text": SUMMARY_PREFIX + summary}
    if isinstance(cache_control, dict):
        part[CACHE_CONTROL] = cache_control
    message: Item = {"type": MESSAGE, "role": "user", "content": [part]}
    if isinstance(item_id, str):
        message["id"] = item_id
    return message


def kept_messages(items: list[Item]) -> list[Item]:
    """The ``user`` messages of a context as the client sent it (not its model view, whose
    summaries are not the client's): what ``/responses/compact`` returns before its
    compaction item."""
    return [item for item in items if item.get("type") == MESSAGE and item.get("role") == "user"]


def _summary(item: Item, tenant_id: str, sealer: Sealer | None, param: str) -> str:
    """A compaction item's summary: sealed, or shown beside its seal (``content``: a
    Messages block's), the two then checked against each other."""
    shown = item.get(SHOWN)
    if isinstance(shown, str):
        return sealed.signed_summary(sealer, tenant_id, item.get(ENCRYPTED), shown, param)
    return sealed.unseal(sealer, sealed.COMPACTION, tenant_id, item.get(ENCRYPTED), param)


def _needs_view(item: Item, sealer: Sealer | None) -> bool:
    kind = item.get("type")
    return kind in (sealed.COMPACTION, sealed.COMPACTION_TRIGGER) or _carries_seal(item, sealer)


def _carries_seal(item: Item, sealer: Sealer | None) -> bool:
    """A reasoning item with an ``encrypted_content``, when there is a sealer to check it
    (the composition root always wires one)."""
    blob = item.get(ENCRYPTED)
    return (
        item.get("type") == REASONING
        and isinstance(blob, str)
        and blob != ""
        and sealer is not None
    )


def _as_it_came(item: Item, sealer: Sealer | None) -> bool:
    """A reasoning item with an upstream's seal as it came (not sealed over)."""
    return _carries_seal(item, sealer) and not _owned(item[ENCRYPTED], sealer)


def _owned(blob: str, sealer: Sealer | None) -> bool:
    return sealer is not None and sealer.owns(blob.removeprefix(REDACTED))


def _without_seal(item: Item) -> Item:
    return {key: value for key, value in item.items() if key != ENCRYPTED}


def _kept(item: Item, roles: frozenset[str]) -> bool:
    """Whether an item before the last compaction still reaches the model (a message of
    one of ``roles``)."""
    kind = item.get("type")
    return (kind == MESSAGE and item.get("role") in roles) or kind == ADDITIONAL_TOOLS


def standalone(item: Item) -> bool:
    """Whether ``item`` is a compaction whose summary stands for the user's messages too:
    one shown beside its seal, a Messages compaction's (asked with the standalone prompt,
    and sent back in place of the whole conversation)."""
    return item.get("type") == sealed.COMPACTION and isinstance(item.get(SHOWN), str)


def _opened_reasoning(
    item: Item, tenant_id: str, sealer: Sealer | None, param: str, given: bool
) -> Item:
    """``item`` as the model is shown it; ``given``: it is the request's own input, where
    an upstream's seal that was not sealed over is left out."""
    assert sealer is not None
    blob: str = item[ENCRYPTED]
    if not _owned(blob, sealer):  # an upstream's, as it came
        return _without_seal(item) if given else item
    if not blob.startswith(REDACTED):
        text = sealed.opened(sealer, REASONING, tenant_id, blob)
        if text is not None:  # the gateway's seal of the text
            shown = _without_seal(item)
            shown["content"] = [{"type": "reasoning_text", "text": text}]
            return shown
    opened = unwrapped_thinking(sealer, tenant_id, blob)
    if opened is None:
        raise sealed.invalid(REASONING, param)
    shown = {**item, ENCRYPTED: opened.seal}
    if opened.text is not None:  # the thinking the seal signs, not what came with it
        shown["content"] = [{"type": "reasoning_text", "text": opened.text}]
    return shown
