"""``ForwardChat``: a Chat Completions request forwarded untouched, or translated.

When the request's route allows it (:class:`~stateway.core.commands.ForwardChat` says
when: one candidate speaking Chat Completions, no gateway tools), its body goes to the
upstream as it came and the answer is relayed back as it arrives, holding the config
generation until the relay closes (:class:`~stateway.core.generations.HeldRelay`);
telemetry and the rate limits learn what it used from its tail, and its candidate's
circuit how it ended, as a translated attempt's end tells it (:func:`_counted`); to a
backend whose cache is kept per tenant (``cache_salt``), the body carries its tenant's
salt. Anything else, a stream that would not report its usage while tokens are counted,
a ``tool_choice`` naming a function to a server not known to force it as named
(llama.cpp reads one as ``auto``; the backend sends it in a form the server forces), and
a ``custom`` tool, or a ``custom`` or ``allowed_tools`` choice, to a server not known to
take them (vLLM and llama.cpp refuse a custom tool: the backend offers it as a function),
is translated into a ``CreateResponse`` and started as any run (:func:`takes_tools`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from typing import Any

from stateway.core.backend import ChatForwarder, Relay
from stateway.core.commands import ForwardChat
from stateway.core.errors import GatewayError, ServerShuttingDown
from stateway.core.generations import Generations, HeldRelay
from stateway.core.limits import RateLimits
from stateway.core.ports import CacheSalts
from stateway.core.principal import Principal
from stateway.core.routing import Candidate
from stateway.core.routing.attempts import Outcome, log_relayed, retry_after, unhealthy
from stateway.core.routing.health import HealthBoard
from stateway.core.run_registry import RunRegistry
from stateway.core.runs import Run
from stateway.core.starting import RunStarter
from stateway.core.telemetry import RunReport, Telemetry
from stateway.core.token_estimate import BYTES_PER_TOKEN, image_tokens


@dataclass(frozen=True, slots=True)
class _Asked:
    """What a relayed answer's end needs of its request (:meth:`ChatForwarding._relayed`)."""

    model: str
    prompt: int
    """The prompt's estimated tokens (:func:`_prompt_estimate`; 0 where tokens are not
    counted), taken before the relay opens: neither the body nor its parsed fields (as
    large) are held while the answer is relayed."""


class ChatForwarding:
    def __init__(
        self,
        generations: Generations,
        runs: RunRegistry,
        starter: RunStarter,
        limits: RateLimits | None,
        telemetry: Telemetry,
        *,
        salts: CacheSalts,
    ) -> None:
        self._generations = generations
        self._runs = runs
        self._starter = starter
        self._limits = limits
        self._telemetry = telemetry
        self._salts = salts

    async def start(self, principal: Principal, command: ForwardChat) -> Relay | Run:
        """The relayed answer, or the translated run, started (an attached one not yet
        driven: its caller drives it)."""
        if self._runs.closing:
            raise ServerShuttingDown()
        generations = self._generations
        generation = generations.acquire()  # the relay's, or the run's, to its end
        try:
            route = generation.router.resolve(command.model)
            # A stream that does not report its usage is translated where tokens are
            # counted (the gateway's own run knows them): else it would be free.
            uncounted = self._limits is None or not self._limits.counts_tokens
            forwardable = uncounted or command.reports_usage
            forwarder = route.forwarder
            if (
                forwarder is not None
                and not command.needs_gateway
                and forwardable
                and takes_tools(command.fields, forwarder)
            ):
                if (
                    forwarder.cache_salted
                    and (salt := self._salts.salt(principal.tenant_id)) is not None
                ):
                    body = command.salted_body_for(route.upstream_model, salt)
                else:  # the common case: one attribute read more than before salts
                    body = command.body_for(route.upstream_model)
                health = generation.router.state.health
                candidate = route.candidates[0]
                # What the relay's end needs of the request, not the request: its body
                # (megabytes, maybe) is not held while the answer is relayed.
                counted = self._limits is not None and self._limits.counts_tokens
                prompt = _prompt_estimate(len(body), command.fields) if counted else 0
                asked = _Asked(command.model, prompt)
                ended = partial(self._relayed, principal, asked, route.name, candidate, health)
                held = HeldRelay(generations, generation, self._runs, ended)
                return await held.open(forwarder, body, command.fields)
            return await self._starter.admit(principal, await command.translate(), generation)
        except BaseException:
            generations.release(generation)
            raise

    def _relayed(
        self,
        principal: Principal,
        asked: _Asked,
        route: str,
        candidate: Candidate,
        health: HealthBoard,
        relay: Relay | None,
        outcome: Outcome,
        error: GatewayError | None,
    ) -> None:
        """Tell telemetry what a relayed answer used (its one upstream attempt, ``relay``
        None when the upstream never answered), and take the tokens it reported out of
        its principal's bucket; or, when it reported none (its client left before the
        usage came, or it was cut short), its output's, estimated, and once its output
        began, its prompt's too (estimated as it was sent), as a translated
        run's (:func:`~stateway.core.limits.charged_tokens`): leaving before the end must
        not make an answer free. Its candidate's circuit is told how it ended
        (:func:`_counted`), and the log, as a translated attempt's end is logged."""
        failure = _counted(health, candidate.key, relay, outcome, error)
        status = None if relay is None else relay.status
        detail = None if failure is None else failure.code
        log_relayed(route, candidate.key, outcome, detail, status)
        attempt = {"backend": candidate.backend.name, "outcome": outcome}
        usage = None if relay is None else relay.usage()
        report = RunReport(principal.tenant_id, asked.model, usage, [attempt])
        self._telemetry.run_ended(report)
        if self._limits is None or relay is None:
            return
        if usage is not None:
            self._limits.charge_after(principal, None, lambda: usage.total_tokens)
        elif relay.status < 400:
            estimated = partial(_estimated, relay, asked.prompt)
            self._limits.charge_after(principal, None, estimated)


def _counted(
    health: HealthBoard,
    key: str,
    relay: Relay | None,
    outcome: Outcome,
    error: GatewayError | None,
) -> GatewayError | None:
    """A relayed answer's end on its candidate's circuit, as a translated attempt's end
    counts (:mod:`stateway.core.routing.plan`): relayed to its end, a success; failed or
    cut by the server (:func:`~stateway.core.routing.attempts.unhealthy`: the error its
    status and body mean, else the upstream's error), a failure, with the ``Retry-After`` it asked
    for; a request refused as such, the gateway's own full queue, a client that left, none.
    A relay is never a half-open circuit's probe: its route (one candidate) sends it
    whatever the circuit, so it takes no probe's place, and its success closes the circuit
    as the probe's would. The circuit is what a route of several candidates sharing this
    one reads (its key: ``backend/model``). Returns the failure, if any."""
    if outcome == "ok":
        health.succeeded(key)
        return None
    if outcome == "cancelled":
        return error
    failure = (relay.failure() if relay is not None else None) or error
    if failure is not None and unhealthy(failure):
        health.failed(key, retry_after(failure))
    return failure


def _estimated(relay: Relay, prompt: int) -> int:
    """A relayed answer's tokens its upstream never counted: its output's, and once that
    began, the ``prompt``'s."""
    output = relay.output_estimate()
    return output + prompt if output else 0


def _prompt_estimate(sent: int, fields: dict[str, Any]) -> int:
    """A forwarded body's estimated tokens: its ``sent`` bytes at the estimate's rate, but
    each image counted as one, as a translated run's estimate counts it, not by its
    base64 (``fields``: the body parsed)."""
    images = list(_images(fields))
    size = sent - sum(_utf8_length(url) for url, _ in images)
    return -(-max(0, size) // BYTES_PER_TOKEN) + sum(t for _, t in images)


def _utf8_length(text: str) -> int:
    """``text``'s UTF-8 bytes, not copied for an ASCII one (a data URL's base64, which may
    be megabytes: this is counted before each relay where tokens are)."""
    return len(text) if text.isascii() else len(text.encode())


def _images(fields: dict[str, Any]) -> Iterator[tuple[str, int]]:
    """Each image part of a Chat Completions body's messages: its URL (its data, most
    often) and its estimated tokens."""
    messages = fields.get("messages")
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            image = part.get("image_url") if isinstance(part, dict) else None
            if isinstance(image, dict) and isinstance(url := image.get("url"), str):
                yield url, image_tokens(image)


def takes_tools(fields: dict[str, Any], forwarder: ChatForwarder) -> bool:
    """Whether ``forwarder``'s server takes the tools and ``tool_choice`` of a request's
    ``fields`` as sent: a named function only if it forces one as named, a ``custom`` tool
    (or a choice of one, or of ``allowed_tools``) only if it takes them. A request without
    either costs two lookups; anything else malformed is the server's to judge."""
    choice, tools = fields.get("tool_choice"), fields.get("tools")
    if type(choice) is dict:
        kind = choice.get("type")
        if kind == "function" and not forwarder.takes_named_choice:
            return False
        if (kind == "custom" or kind == "allowed_tools") and not forwarder.takes_custom_tools:
            return False
    if not tools or type(tools) is not list or forwarder.takes_custom_tools:
        return True
    for tool in tools:  # noqa: SIM110  # a loop: half a generator's cost over 50 tools
        if type(tool) is dict and tool.get("type") == "custom":
            return False
    return True
