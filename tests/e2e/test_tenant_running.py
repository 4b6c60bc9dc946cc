"""Tenant isolation while the owner's objects are still running, on SQLite and PostgreSQL:
a background response in progress, a foreground stream in progress (stored or not), a
conversation held by a running turn. Every request naming one of them with another
tenant's key gets exactly the answer a missing id of the same shape gets: not
``response_in_progress``, not ``conversation_locked``, not the run's snapshot, which a
check made before the tenant's would give away. ``tests/e2e/test_tenant_isolation.py``
walks every route over finished objects; ``test_tenant_replays.py`` the WebSocket frames
naming a running response."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
import pytest

from tests.e2e.test_tenant_isolation import (
    MODEL,
    SLOW,
    Tenants,
    client,
    ended,
    masked,
    same_shape,
    sdk,
    tenants,
)

__all__ = ["tenants"]  # the fixture, shared with the walk of every route

Ask = Callable[[httpx2.Client, str], httpx2.Response]


def _body(**fields: Any) -> dict[str, Any]:
    return {"model": MODEL, "input": "hi", **fields}


RESPONSE_PROBES: dict[str, Ask] = {
    "retrieve": lambda c, i: c.get(f"/v1/responses/{i}"),
    "watch": lambda c, i: c.get(f"/v1/responses/{i}?stream=true"),
    "resume": lambda c, i: c.get(f"/v1/responses/{i}?stream=true&starting_after=0"),
    "resume past its log": lambda c, i: c.get(f"/v1/responses/{i}?stream=true&starting_after=500"),
    "input items": lambda c, i: c.get(f"/v1/responses/{i}/input_items"),
    "cancel": lambda c, i: c.post(f"/v1/responses/{i}/cancel"),
    "continue": lambda c, i: c.post("/v1/responses", json=_body(previous_response_id=i)),
    "continue streamed": lambda c, i: c.post(
        "/v1/responses", json=_body(previous_response_id=i, stream=True)
    ),
    "continue in background": lambda c, i: c.post(
        "/v1/responses", json=_body(previous_response_id=i, background=True)
    ),
    "compact": lambda c, i: c.post("/v1/responses/compact", json=_body(previous_response_id=i)),
    "count tokens": lambda c, i: c.post(
        "/v1/responses/input_tokens", json=_body(previous_response_id=i)
    ),
    "delete": lambda c, i: c.delete(f"/v1/responses/{i}"),  # last: the owner's run goes on
}

CONVERSATION_PROBES: dict[str, Ask] = {
    "turn": lambda c, i: c.post("/v1/responses", json=_body(conversation=i)),
    "turn streamed": lambda c, i: c.post("/v1/responses", json=_body(conversation=i, stream=True)),
    "turn in background": lambda c, i: c.post(
        "/v1/responses", json=_body(conversation=i, background=True)
    ),
    "count tokens": lambda c, i: c.post("/v1/responses/input_tokens", json=_body(conversation=i)),
    "retrieve": lambda c, i: c.get(f"/v1/conversations/{i}"),
    "list items": lambda c, i: c.get(f"/v1/conversations/{i}/items"),
    "add items": lambda c, i: c.post(
        f"/v1/conversations/{i}/items",
        json={"items": [{"type": "message", "role": "user", "content": "x"}]},
    ),
    "update": lambda c, i: c.post(f"/v1/conversations/{i}", json={"metadata": {"x": "y"}}),
    "delete": lambda c, i: c.delete(f"/v1/conversations/{i}"),
}


def differences(bob: httpx2.Client, probes: dict[str, Ask], theirs: str) -> dict[str, Any]:
    """The probes whose answer to ``theirs`` is not the answer to a missing id, with both
    answers (ids masked)."""
    missing = same_shape(theirs)
    found = {}
    for name, ask in probes.items():
        foreign = masked(ask(bob, theirs), theirs)
        unknown = masked(ask(bob, missing), missing)
        if foreign != unknown or foreign[0] not in (400, 404):
            found[name] = (foreign, unknown)
    return found


@contextmanager
def streaming(tenants: Tenants, store: bool) -> Iterator[str]:
    """The id of a foreground stream of the owner's, open while the block runs."""
    with sdk(tenants, tenants.alice) as alice:
        stream = alice.responses.create(model=MODEL, input=f"slow {SLOW}", stream=True, store=store)
        with stream:
            first = next(iter(stream))
            assert first.type == "response.created"
            yield first.response.id


def test_a_background_response_in_progress_is_answered_as_a_missing_one(
    tenants: Tenants,
) -> None:
    with sdk(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
        running = alice.responses.create(model=MODEL, input=f"slow {SLOW}", background=True)
        assert differences(bob, RESPONSE_PROBES, running.id) == {}
        # queued until its upstream call is seated, which the create does not wait for
        assert alice.responses.retrieve(running.id).status in {"queued", "in_progress"}
        ended(alice, running.id)
        assert alice.responses.retrieve(running.id).status == "completed"


@pytest.mark.parametrize("store", [True, False], ids=["stored", "unstored"])
def test_a_foreground_stream_in_progress_is_answered_as_a_missing_one(
    tenants: Tenants, store: bool
) -> None:
    with streaming(tenants, store) as response_id, client(tenants, tenants.bob) as bob:
        assert differences(bob, RESPONSE_PROBES, response_id) == {}
        if store:  # the owner still reads it, running
            with client(tenants, tenants.alice) as alice:
                assert alice.get(f"/v1/responses/{response_id}").json()["status"] == "in_progress"


def test_a_conversation_held_by_a_running_turn_is_answered_as_a_missing_one(
    tenants: Tenants,
) -> None:
    with sdk(tenants, tenants.alice) as alice, client(tenants, tenants.bob) as bob:
        conversation = alice.conversations.create().id
        turn = alice.responses.create(
            model=MODEL, input=f"slow {SLOW}", conversation=conversation, background=True
        )
        with client(tenants, tenants.alice) as owner:  # what makes the probes meaningful
            held = owner.post("/v1/responses", json=_body(conversation=conversation))
        assert held.status_code == 409, held.text
        assert held.json()["error"]["code"] == "conversation_locked"

        assert differences(bob, CONVERSATION_PROBES, conversation) == {}

        ended(alice, turn.id)
        assert alice.responses.retrieve(turn.id).status == "completed"
        assert alice.conversations.retrieve(conversation).metadata in ({}, None)
        items = alice.conversations.items.list(conversation).data
        assert [item.type for item in items] == ["message", "message"]
