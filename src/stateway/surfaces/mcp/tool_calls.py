"""A ``tools/call`` answered, for the principal its request acts for (``server.py``).

The tool is named (an unknown one is a JSON-RPC error), its input items counted (at most
``[server] max_input_items``, as the route takes), its arguments read
(:func:`~.inputs.as_parsed`) and checked against its input model, then it runs as
commands for ``Gateway.execute`` (``tools.py``); what it gives, or how it failed, is
shaped as the call's result (``tool_results.py``): a failure is an ``isError`` result,
an unexpected one logged and named as an internal error, never a JSON-RPC error telling
its internals.

A call under a ``command_id`` runs once: retries get the first result (ADR 0011), and
its work runs in a task of its own, which the call's cancellation
(``notifications/cancelled``) leaves to finish and remember its result for a retry, as
a client that leaves a request sent with ``Idempotency-Key`` does; the surface cancels
those still running when it stops (:meth:`ToolCalls.cancel`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import orjson
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, CallToolRequestParams, CallToolResult
from pydantic import ValidationError

from stateway.core.errors import GatewayError, InternalError
from stateway.core.exactly_once import fingerprint
from stateway.core.gateway import Gateway
from stateway.core.principal import Principal
from stateway.protocols.responses.body import check_item_count
from stateway.surfaces.mcp import resources, tool_results
from stateway.surfaces.mcp.inputs import as_parsed
from stateway.surfaces.mcp.tools import TOOLS, Result
from stateway.surfaces.mcp.tools import Tool as ToolSpec

log = logging.getLogger(__name__)


class ToolCalls:
    """The tools' calls on ``gateway``."""

    __slots__ = ("_detached", "_gateway", "_max_input_items")

    def __init__(self, gateway: Gateway, max_input_items: int | None = None) -> None:
        """``max_input_items``: ``[server] max_input_items`` (None: no bound)."""
        self._gateway = gateway
        self._max_input_items = max_input_items
        self._detached: set[asyncio.Task[Result]] = set()
        """Calls under a ``command_id`` (see :meth:`_run`), until they end."""

    async def answer(self, params: CallToolRequestParams, principal: Principal) -> CallToolResult:
        tool = TOOLS.get(params.name)
        if tool is None:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name!r}.")
        if tool.takes_items and self._max_input_items is not None:
            try:  # first, as the route counts a body's items: reading them costs
                check_item_count(params.arguments, self._max_input_items)
            except GatewayError as error:
                return tool_results.failed(error.to_dict())
        try:
            arguments = as_parsed(params.arguments or {})
        except ValueError:
            return tool_results.unreadable_numbers(tool.name)
        try:
            args = tool.input.model_validate(arguments)
        except ValidationError as exc:
            return tool_results.invalid_arguments(tool.name, exc)
        try:
            result = await self._run(tool, principal, args)
        except GatewayError as error:
            return tool_results.failed(error.to_dict())
        except Exception:  # the tools' error boundary, as a route's (http/errors.py)
            # The SDK would send the exception's text as a JSON-RPC error: an isError
            # result names no internals, the log has them.
            log.exception("mcp: tool %s failed", tool.name)
            return tool_results.failed(InternalError().to_dict())
        return tool_results.succeeded(result, resources.link_of(principal, result))

    def cancel(self) -> None:
        """The surface stops: the calls still running under a ``command_id`` end."""
        for task in self._detached:
            task.cancel()

    async def _run(self, tool: ToolSpec, principal: Principal, args: Any) -> Result:
        """The tool's result; run once per ``command_id`` (retries get the first result).

        A call cancelled (``notifications/cancelled``) stops its work, except under a
        ``command_id``: that work runs in a task of its own, which the call's
        cancellation leaves to finish and remember its result for a retry (as a client
        that leaves a request sent with ``Idempotency-Key`` does)."""
        command_id: str | None = getattr(args, "command_id", None)
        if command_id is None:
            return await tool.run(self._gateway, principal, args)
        work = asyncio.create_task(self._once(tool, principal, args, command_id))
        self._detached.add(work)
        work.add_done_callback(_settled)
        work.add_done_callback(self._detached.discard)
        return await asyncio.shield(work)

    async def _once(
        self, tool: ToolSpec, principal: Principal, args: Any, command_id: str
    ) -> Result:
        fields = args.model_dump(mode="json", exclude={"command_id"})
        digest = fingerprint(
            b"mcp", tool.name.encode(), orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
        )
        async with self._gateway.once(principal, command_id, digest, param="command_id") as once:
            if once.outcome is not None:
                remembered: Result = orjson.loads(once.outcome.body)
                return remembered
            result = await tool.run(self._gateway, principal, args)
            once.remember(orjson.dumps(result))
            return result


def _settled(task: asyncio.Task[Result]) -> None:
    """Retrieve the outcome of a call's task whose caller left (else asyncio logs it as
    never retrieved): the retry, if any, got it from the command's claim."""
    if not task.cancelled():
        task.exception()
