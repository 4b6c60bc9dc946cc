"""Running one round's gateway tool calls: permits, exclusivity, timeouts, failures.

The calls of a round run concurrently, at most ``max_concurrent_calls`` at once (one at a
time when the request set ``parallel_tool_calls: false``); calls of a tool that is not
parallel-safe never overlap each other within the response. Each call gets ``timeout``
seconds. Whatever a call does (answers, fails, times out, raises a bug) it ends as a
:class:`Outcome`: failures are fed back to the model as failed tool outputs, never a
failed response. A timeout is a ``protocol`` error with ``REQUEST_TIMEOUT`` (-32001, as MCP
SDKs report their own request timeouts); an adapter's bug one with ``INTERNAL_ERROR``.
Cancelling the round (the client left, the response was deleted) cancels every call still
running. Each call is a span (:meth:`~stateway.core.telemetry.Telemetry.tool_call`; a
failed call's ``error.type`` is ``timeout`` or its error's kind), and its outcome (``ok``,
``error``, ``timeout``, or ``cancelled`` for a call cancelled while it ran; one cancelled
while it waited for its turn was never made) is counted by its kind.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from dataclasses import dataclass

from stateway.core.telemetry import NoTelemetry, Telemetry, ToolOutcome
from stateway.core.tools.ports import INTERNAL_ERROR, REQUEST_TIMEOUT, ToolError, ToolFailure

log = logging.getLogger(__name__)

CANCELLED: ToolOutcome = "cancelled"


@dataclass(frozen=True, slots=True)
class Call:
    invoke: Callable[[], Awaitable[str]]
    exclusive: str | None = None
    """Calls sharing this key run one at a time (a tool that is not parallel-safe)."""
    label: str = "tool"
    """Named in logs and failure messages."""
    kind: str = "tool"
    """What is called (``mcp``, ``mcp_list_tools``, ``web_search``, ``tool_search``): the
    name metrics and spans know it by (a label may hold client-chosen names)."""
    name: str = ""
    """An MCP tool's name on its server (what a span names the tool by); empty for the
    gateway's own tools, which :attr:`kind` names."""
    call_id: str | None = None
    """The id of the call's item in the response's output (a span's tool call id)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    output: str | None = None
    error: ToolError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class Executor:
    def __init__(
        self, *, timeout: float, max_concurrent: int, telemetry: Telemetry | None = None
    ) -> None:
        self._timeout = timeout
        self._telemetry = telemetry or NoTelemetry()
        self._max_concurrent = max_concurrent
        self._locks: dict[str, asyncio.Lock] = {}
        """Per exclusive key, for the response's lifetime (one executor per run)."""

    async def run(self, calls: Sequence[Call], *, parallel: bool = True) -> list[Outcome]:
        """The outcome of each call, in order."""
        permits = asyncio.Semaphore(self._max_concurrent if parallel else 1)
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._one(call, permits)) for call in calls]
        return [task.result() for task in tasks]

    async def _one(self, call: Call, permits: asyncio.Semaphore) -> Outcome:
        exclusive: AbstractAsyncContextManager[object] = nullcontext()
        if call.exclusive is not None:
            exclusive = self._locks.setdefault(call.exclusive, asyncio.Lock())
        async with exclusive, permits:
            with self._telemetry.tool_call(call) as span:
                try:
                    outcome, kind = await self._invoke(call)
                except asyncio.CancelledError:
                    span.set("stateway.outcome", CANCELLED)
                    self._telemetry.tool_called(call.kind, CANCELLED)
                    raise
                span.set("stateway.outcome", kind)
                if outcome.error is not None:  # a timeout, or the error's kind
                    span.failed("timeout" if kind == "timeout" else outcome.error.kind)
            self._telemetry.tool_called(call.kind, kind)
            return outcome

    async def _invoke(self, call: Call) -> tuple[Outcome, ToolOutcome]:
        try:
            async with asyncio.timeout(self._timeout):
                return Outcome(output=await call.invoke()), "ok"
        except TimeoutError:
            message = f"The call to {call.label} timed out after {self._timeout:g} s."
            return Outcome(error=ToolError.protocol(REQUEST_TIMEOUT, message)), "timeout"
        except ToolFailure as failure:
            return Outcome(error=failure.error), "error"
        except Exception:  # a bug in an adapter must not fail the response
            log.exception("tool call %s raised", call.label)
            message = f"The call to {call.label} failed unexpectedly."
            return Outcome(error=ToolError.protocol(INTERNAL_ERROR, message)), "error"
