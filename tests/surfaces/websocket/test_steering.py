"""A connection's steering in memory: steers logged into a running response's stream (by
the core, told through ``Gateway.execute``) or numbered on from its end, what its queued
input becomes, and the failures that return it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stateway.core import events as ev
from stateway.core import steering as core_steering
from stateway.core.commands import CreateResponse, SteerResponse
from stateway.core.errors import InvalidRequest
from stateway.core.principal import Principal
from stateway.core.response import ResponseState
from stateway.core.results import Noted
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.protocols.responses.frames import SteerFrame
from stateway.surfaces.websocket.steering import Steering, Target

SETTINGS = {"model": "m", "instructions": "Be brief.", "store": False}
TOOL_CALL = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}


PRINCIPAL = Principal("t")


class Core:
    """The gateway as steering reaches it: its ``SteerResponse``, on the runs here."""

    def __init__(self) -> None:
        self.runs = RunRegistry()

    async def execute(self, principal: Principal, command: SteerResponse) -> Noted:
        return core_steering.steer(self.runs, principal, command)


class Connection:
    def __init__(self, max_pending: int = 2) -> None:
        self.sent: list[dict[str, Any]] = []
        self.core = Core()
        self.steering = Steering(
            self.core,  # type: ignore[arg-type]
            max_pending,
            4,
            lambda frame: self.sent.append(orjson.loads(frame)),
        )

    async def start(self, lane: str | None = "a", **command: Any) -> tuple[Run, Target]:
        request = CreateResponse(model="m", input=[], **command)
        state = ResponseState.start(f"resp_{len(self.sent)}_{lane}", "t", 0.0, request)
        run = Run(state, [])
        run.emit(ev.ResponseCreated(state))
        self.core.runs.add(run)
        return run, await self.steering.track(lane, run, dict(SETTINGS), request, PRINCIPAL)

    async def steer(self, target: Target | str, text: Any = "more") -> None:
        response_id = target if isinstance(target, str) else target.response_id
        await self.steering.steer(SteerFrame(response_id, text))


def end(run: Run, status: str = "completed", output: list[dict[str, Any]] | None = None) -> None:
    run.finishing = True
    run.state.status = status  # type: ignore[assignment]
    run.state.output = output or []
    run.emit(ev.ResponseFinished(run.state))
    run.close()


def notices(run: Run) -> list[ev.Notice]:
    return [event for event in run.events if isinstance(event, ev.Notice)]


async def test_steers_of_a_running_response_enter_its_log_and_become_a_successor() -> None:
    connection = Connection()
    run, target = await connection.start()
    await connection.steer(target, "first")
    await connection.steer(target, [{"role": "user", "content": "second"}])
    await connection.steer(target, "third")  # one past max_pending
    accepted, accepted_too, too_many = notices(run)
    assert [n.type for n in (accepted, accepted_too)] == ["response.steer.accepted"] * 2
    assert too_many.fields["error"]["code"] == "too_many_pending_steers"
    assert run.events.index(accepted) == 1  # numbered by its place: right after created
    assert connection.sent == []

    end(run)
    successor = await connection.steering.finished(target, draining=False)
    assert successor is not None
    command = successor.frame.command
    assert command.previous_response_id == run.id
    assert (command.instructions, command.store, command.stream) == ("Be brief.", False, True)
    assert [item["content"][0]["text"] for item in command.input] == ["first", "second"]
    assert successor.frame.stream_id == "a"
    assert target.run is None  # a finished run is not kept


async def test_an_accepted_steer_asks_its_run_to_stop_and_a_steered_end_gets_a_successor() -> None:
    connection = Connection()
    run, target = await connection.start()
    assert not run.steered
    await connection.steer(target, "change course")
    assert run.steered  # the loop ends it at its next safe boundary
    run.state.incomplete_reason = "steered"
    end(run, "incomplete")
    successor = await connection.steering.finished(target, draining=False)
    assert successor is not None
    assert successor.frame.command.previous_response_id == run.id
    assert [i["content"][0]["text"] for i in successor.frame.command.input] == ["change course"]


async def test_a_refused_steer_leaves_the_run_going_and_an_incomplete_end_fails_its_input() -> None:
    connection = Connection()
    run, target = await connection.start(conversation_id="conv_1")  # conversations are not steered
    await connection.steer(target)
    assert not run.steered
    other, other_target = await connection.start(lane="b")
    await connection.steer(other_target, "late")
    other.state.incomplete_reason = "max_output_tokens"
    end(other, "incomplete")
    assert await connection.steering.finished(other_target, draining=False) is None
    [failed] = connection.sent  # numbered on after the end
    assert failed["type"] == "response.steer.failed"
    assert failed["error"]["code"] == "response_not_active"
    assert failed["error"]["message"] == "The response ended incomplete; its input was not taken."
    assert await connection.steering.begin("b", None) is None  # the lane's next request
    assert len(connection.sent) == 1


async def test_a_steer_while_finishing_waits_for_the_terminal_event_then_is_numbered_on() -> None:
    connection = Connection()
    run, target = await connection.start()
    run.finishing = True
    await connection.steer(target, "late")
    assert notices(run) == []
    end(run)
    assert await connection.steering.finished(target, draining=True) is None
    accepted, failed = connection.sent
    assert (accepted["type"], accepted["sequence_number"], accepted["stream_id"]) == (
        "response.steer.accepted",
        2,
        "a",
    )
    assert failed["sequence_number"] == 3
    assert failed["error"]["code"] == "successor_creation_failed"  # shutting down
    assert failed["steer"] == {
        "input": "late",
        "previous_response_id": run.id,
        "id": accepted["steer"]["id"],
    }


async def test_a_response_waiting_for_tool_output_keeps_the_input_for_its_continuation() -> None:
    connection = Connection()
    run, target = await connection.start()
    await connection.steer(target, "queued")
    end(run, output=[TOOL_CALL])
    assert await connection.steering.finished(target, draining=False) is None
    [pending] = connection.sent
    assert pending["type"] == "response.steer.pending"
    assert pending["sequence_number"] == 3  # created, accepted, completed
    assert pending["required_input"] == [
        {"type": "function_call_output", "call_id": "c1", "name": "f"}
    ]
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    continuation = CreateResponse(model="m", input=[output], previous_response_id=run.id)
    commit = await connection.steering.begin("a", continuation)
    assert commit is not None
    assert [item["type"] for item in continuation.input] == ["message", "function_call_output"]
    await connection.steering.uncommitted(commit)  # its create failed
    assert connection.sent[-1]["error"] == {
        "code": "successor_creation_failed",
        "message": "The response that would take this input could not be created.",
        "type": "invalid_request_error",
    }
    assert connection.sent[-1]["sequence_number"] == 4
    await connection.steer(target, "gone")
    assert connection.sent[-1]["error"]["code"] == "response_not_found"
    assert connection.sent[-1]["sequence_number"] == 0


async def test_refusals() -> None:
    connection = Connection()
    run, target = await connection.start(conversation_id="conv_1")
    await connection.steer(target)
    await connection.steer(target, [{"role": "system", "content": "x"}])
    codes = [n.fields["error"]["code"] for n in notices(run)]
    assert codes == ["steering_not_supported", "invalid_input"]
    with pytest.raises(InvalidRequest) as capped:  # max_pending refused: a cap's 429
        await connection.steer(target)
    assert (capped.value.status, capped.value.code) == (429, "websocket_limit_exceeded")
    assert len(notices(run)) == 2

    failed_run, failed = await connection.start("b")
    end(failed_run, "failed")
    await connection.steer(failed)
    assert notices(failed_run) == []
    await connection.steering.finished(failed, draining=False)
    assert connection.sent[-1]["error"]["code"] == "response_not_active"

    done_run, done = await connection.start("c")
    end(done_run)
    await connection.steering.finished(done, draining=False)
    await connection.steer(done)
    assert connection.sent[-1]["error"]["code"] == "response_already_completed"
    assert connection.sent[-1]["stream_id"] == "c"


@pytest.mark.parametrize(
    "part",
    [
        {"type": ["input_text"], "text": "x"},
        {"type": {"type": "input_text"}, "text": "x"},
        {"type": "input_text", "text": ["x"]},
        {"type": "input_image", "image_url": "data:,", "detail": ["low"]},
    ],
)
async def test_a_part_of_a_wrong_type_fails_the_steer_and_leaves_the_run_going(part: Any) -> None:
    """It raised a TypeError, which closed the whole connection without a close frame."""
    connection = Connection()
    run, target = await connection.start()
    await connection.steer(target, [{"role": "user", "content": [part]}])
    [failed] = notices(run)
    assert failed.type == "response.steer.failed"
    assert failed.fields["error"]["code"] == "invalid_input"
    assert not run.steered


async def test_a_connection_keeps_the_targets_of_max_lanes_lanes() -> None:
    """A client may give each request a stream_id of its own: past ``max_lanes`` targets
    (4 here), those of ended responses are let go, the oldest first, as a lane's next
    request lets its own go."""
    connection = Connection()
    for n in range(10):
        run, target = await connection.start(lane=f"lane-{n}")
        end(run)
        await connection.steering.finished(target, draining=False)
    first, last = "resp_0_lane-0", "resp_0_lane-9"
    await connection.steer(first)
    await connection.steer(last)
    assert [frame["error"]["code"] for frame in connection.sent] == [
        "response_not_found",
        "response_already_completed",
    ]
    assert len(connection.steering._by_lane) == 4


async def test_a_finished_response_keeps_none_of_its_create_s_fields() -> None:
    """Only a response's end reads its create's fields (for a successor), yet an ended
    target kept them: a client giving each request a stream_id of its own left up to
    ``max_lanes`` of them on the connection, each as large as a frame (129 lanes of 1 MB
    instructions held ~126 MB, outside ``max_checkpoint_bytes``)."""
    connection = Connection()
    run, target = await connection.start()
    end(run)
    assert await connection.steering.finished(target, draining=False) is None
    assert target.settings == {}

    run, target = await connection.start(lane="b")
    await connection.steer(target, "more")
    end(run)
    successor = await connection.steering.finished(target, draining=False)
    assert successor is not None
    assert successor.settings == SETTINGS
    assert successor.frame.command.instructions == "Be brief."
    assert target.settings == {}


async def test_each_failure_returns_the_steer_s_input_naming_the_response_and_why() -> None:
    connection = Connection()
    await connection.steer("resp_gone", [{"role": "user", "content": "lost"}])
    assert connection.sent == [
        {
            "type": "response.steer.failed",
            "sequence_number": 0,
            "error": {
                "code": "response_not_found",
                "message": "No response 'resp_gone' to steer on this connection.",
                "type": "invalid_request_error",
            },
            "steer": {
                "input": [{"role": "user", "content": "lost"}],
                "previous_response_id": "resp_gone",
            },
        }
    ]

    run, target = await connection.start(conversation_id="conv_1")
    await connection.steer(target, "unsteerable")
    [refused] = notices(run)
    assert refused.fields == {
        "error": {
            "code": "steering_not_supported",
            "message": "A response bound to a conversation or compacting automatically "
            "cannot be steered.",
            "type": "invalid_request_error",
        },
        "steer": {"input": "unsteerable", "previous_response_id": run.id},
    }
    await connection.steer(target, "again")
    with pytest.raises(InvalidRequest) as capped:
        await connection.steer(target)
    assert capped.value.message.startswith("This connection reached its limit of 2 refused steers")

    done_run, done = await connection.start("c")
    end(done_run)
    await connection.steering.finished(done, draining=False)
    await connection.steer(done, "late")
    assert connection.sent[-1]["error"]["message"] == "The response completed; it takes no input."
    assert connection.sent[-1]["steer"] == {"input": "late", "previous_response_id": done_run.id}


async def test_a_response_that_ended_before_its_end_was_seen_refuses_steers_at_once() -> None:
    """Its run closed (failed) while its lane had yet to stream the end: the steer is
    refused with the run's status, not accepted and failed later."""
    connection = Connection()
    run, target = await connection.start()
    end(run, "failed")
    await connection.steer(target, "too late")
    await connection.steering.finished(target, draining=False)
    [failed] = connection.sent
    assert failed["type"] == "response.steer.failed"
    assert failed["error"]["message"] == "The response ended failed; it takes no input."
    assert failed["steer"] == {"input": "too late", "previous_response_id": run.id}


async def test_an_accepted_steer_is_named_and_told_pending_at_once_while_input_is_owed() -> None:
    connection = Connection()
    run, target = await connection.start()
    end(run, output=[TOOL_CALL])
    assert await connection.steering.finished(target, draining=False) is None
    await connection.steer(target, "first")
    await connection.steer(target, "second")
    accepted, pending, accepted_too, pending_too = connection.sent
    assert [f["type"] for f in connection.sent] == [
        "response.steer.accepted",
        "response.steer.pending",
    ] * 2
    assert [f["sequence_number"] for f in connection.sent] == [2, 3, 4, 5]
    assert accepted["steer"]["id"].startswith("steer_")
    assert accepted["steer"] == {"id": accepted["steer"]["id"], "previous_response_id": run.id}
    assert pending["steer"] == accepted["steer"]
    assert pending_too["steer"] == accepted_too["steer"] != accepted["steer"]
    assert pending["required_input"] == [
        {"type": "function_call_output", "call_id": "c1", "name": "f"}
    ]


async def test_a_lane_s_next_request_fails_the_steers_its_target_queued() -> None:
    connection = Connection()
    run, target = await connection.start()
    await connection.steer(target, "queued")
    assert await connection.steering.begin("a", None) is None
    accepted, failed = notices(run)
    assert failed.fields == {
        "error": {
            "code": "response_not_active",
            "message": "The response was not continued; its queued input was not taken.",
            "type": "invalid_request_error",
        },
        "steer": {
            "input": "queued",
            "previous_response_id": run.id,
            "id": accepted.fields["steer"]["id"],
        },
    }
