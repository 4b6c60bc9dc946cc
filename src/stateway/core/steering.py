"""A client acting on a response while it runs, besides cancelling it: stopping it at
once (:class:`~stateway.core.commands.InterruptResponse`), and telling it of input sent to
steer it (:class:`~stateway.core.commands.SteerResponse`). Both reach only a run this
process runs for the principal's tenant; what a steer's input becomes (queued, a
successor) is its connection's (WebSocket mode's ``surfaces/websocket/steering.py``).
"""

from __future__ import annotations

from stateway.core.commands import InterruptResponse, SteerResponse
from stateway.core.principal import Principal
from stateway.core.results import Noted
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import CancelReason


def interrupt(runs: RunRegistry, principal: Principal, command: InterruptResponse) -> None:
    """Stop the run at once: it ends ``incomplete`` (``interrupted``) with what it had
    completed; one finishing ends as it would have."""
    run = runs.of(principal.tenant_id, command.response_id)
    if run is not None:
        run.cancel(CancelReason.INTERRUPTED)


def steer(runs: RunRegistry, principal: Principal, command: SteerResponse) -> Noted:
    """Log the steer's notice in the run's stream and, with ``stop``, have the run stop at
    its next safe boundary (before another round of its gateway tool loop)."""
    run = runs.of(principal.tenant_id, command.response_id)
    if run is None:
        return Noted(logged=False)
    logged = run.note(command.notice)
    if command.stop and not run.closed:
        run.steered = True
    return Noted(logged)
