"""The two seams WebSocket mode uses: a prewarm (``generate=False``) asks no model, and a
create whose ``prior`` items are given reads no chain from the store."""

from __future__ import annotations

from stateway.core import events as ev
from stateway.core.commands import CreateResponse, ListInputItems
from stateway.core.inference import Finish, TextDelta, ToolCallDelta
from stateway.core.principal import Principal
from tests.core.fakes import MemoryStore, ScriptedBackend
from tests.core.test_loop import gateway_for, user


async def test_a_prewarm_completes_with_no_output_and_no_upstream_request() -> None:
    backend = ScriptedBackend([TextDelta("never"), Finish("stop")])
    announced: list[tuple[str, int]] = []  # each save, and the events emitted before it
    store = MemoryStore(on_save=lambda r: announced.append((r.status, events_of(r.id))))
    gateway = gateway_for(backend, store)

    def events_of(response_id: str) -> int:
        run = gateway.runs.get(response_id)
        return -1 if run is None else len(run.events)

    command = CreateResponse(model="m", input=[user("base")], stream=True, generate=False)
    run = await gateway.execute(Principal(), command)
    await run.wait()
    assert [type(e) for e in run.events] == [
        ev.ResponseCreated,
        ev.ResponseInProgress,
        ev.ResponseFinished,
    ]
    assert run.state.status == "completed"
    assert run.state.output == []
    assert backend.requests == []
    assert [i["id"] for i in run.context] == ["msg_in"]
    [record] = store.records.values()
    assert record.input_items[0]["id"] == "msg_in"
    # its in-progress row written before response.created, its end before the last event
    assert announced == [("in_progress", 0), ("completed", 2)]


async def test_given_prior_items_are_the_context_without_reading_the_store() -> None:
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    gateway = gateway_for(backend, MemoryStore())
    prior = [user("remembered")]
    command = CreateResponse(
        model="m", input=[user("next")], previous_response_id="resp_unstored", prior=prior
    )
    run = await gateway.execute(Principal(), command)
    await run.wait()
    assert run.state.status == "completed"
    [request] = backend.requests
    texts = [i["content"][0]["text"] for i in request.items]
    assert texts == ["remembered", "next"]
    assert run.context == [*prior, *command.input]


async def test_prior_items_not_in_the_store_are_stored_with_the_input() -> None:
    """A stored run continuing an unstored checkpoint stores the whole context it ran on
    (its ``previous_response_id`` names nothing stored); a stored prior is not repeated."""
    for prior_stored, kept in ((False, ["remembered", "next"]), (True, ["next"])):
        store = MemoryStore()
        gateway = gateway_for(ScriptedBackend([TextDelta("ok"), Finish("stop")]), store)
        command = CreateResponse(
            model="m",
            input=[user("next")],
            previous_response_id="resp_checkpoint",
            prior=[user("remembered")],
            prior_stored=prior_stored,
        )
        run = await gateway.execute(Principal(), command)
        await run.wait()
        assert run.state.status == "completed"
        [record] = store.records.values()
        assert [i["content"][0]["text"] for i in record.input_items] == kept
        page = await gateway.execute(Principal(), ListInputItems(run.id, order="asc"))
        assert [i["content"][0]["text"] for i in page.items] == kept


async def test_a_continuation_from_a_runs_context_keeps_a_cut_calls_id_taken() -> None:
    """A WebSocket checkpoint continues from ``run.context`` and the output. The model
    is never shown a call cut short, but its id must stay taken there too: an upstream
    numbering its calls per turn (``call_0`` again) would otherwise store a second call
    under the cut one's id."""
    cut = {"type": "function_call", "call_id": "call_0", "name": "f", "arguments": "{"}
    cut["status"] = "incomplete"
    backend = ScriptedBackend([TextDelta("ok"), Finish("stop")])
    gateway = gateway_for(backend, MemoryStore())
    first = await gateway.execute(
        Principal(), CreateResponse(model="m", input=[user("hi"), cut, user("go on")])
    )
    await first.wait()
    backend.script = [ToolCallDelta(0, "call_0", "f", "{}"), Finish("tool_calls")]
    command = CreateResponse(
        model="m",
        input=[user("next")],
        previous_response_id=first.id,
        prior=first.context + first.state.output,
    )
    second = await gateway.execute(Principal(), command)
    await second.wait()
    [made] = second.state.output
    assert made["call_id"] not in ("call_0", "")
    sent = backend.requests[-1].items
    assert "function_call" not in [i["type"] for i in sent]  # the cut call stays unseen
