"""The routing sections of the configuration: ``[[routes]]``, ``[aliases]`` and ``[health]``.

A route maps a public model name to candidates (a backend and the name its upstream
knows the model by), tried by ``priority`` tier, by ``weight`` within a tier. Backends'
own ``models`` keep working: each such name is a route of one candidate, and a backend
with no ``models`` that no route names serves every other model name (the catch-all,
as with a single ``--upstream``). See ``core/routing/`` for how a request is routed.

Checked here, each with a message naming the offending value: candidates naming unknown
backends, weights of 0 or less, duplicate route names, names served twice, aliases whose
target is unknown, cycles among aliases, two default routes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import Field

from stateway.config_section import Section


class CapabilitiesConfig(Section):
    """What a candidate can do; everything unless declared otherwise."""

    images: bool = True
    files: bool = True
    """Whether the model reads files; a ``chat`` backend's text files go as text, so only
    other files need it there."""
    reasoning: bool = True
    tool_calls: bool = True
    parallel_tool_calls: bool = True
    context_window: int | None = Field(default=None, ge=1)
    """Input tokens the model takes (estimated for the check); None: not checked."""


class CandidateConfig(Section):
    backend: str = Field(min_length=1)
    """A ``[[backends]]`` name."""
    model: str = Field(min_length=1)
    """The model name the backend's upstream knows."""
    weight: float = Field(default=1.0, gt=0)
    """Share of new chains among the candidates of the same priority."""
    priority: int = Field(default=0, ge=0)
    """Lower is tried first; a tier is tried only once the tiers before it failed."""
    capabilities: CapabilitiesConfig = CapabilitiesConfig()


class StageConfig(Section):
    name: str = Field(min_length=1)
    """An entry point in the group ``stateway.stages``."""
    on_error: Literal["open", "closed"] = "closed"
    options: dict[str, Any] = Field(default_factory=dict)


class RouteConfig(Section):
    name: str = Field(min_length=1)
    """The public model name."""
    candidates: list[CandidateConfig] = Field(min_length=1)
    default: bool = False
    """Serves every model name no route, alias or backend declares."""
    affinity: Literal["chain", "none"] = "chain"
    """``chain``: a continuation goes to the candidate that served its parent."""
    affinity_tolerance: float = Field(default=0.5, ge=0)
    """How far above its weight share (as a fraction of it) a candidate's share of the
    route's runs in flight may go before continuations stop preferring it."""
    max_attempts: int = Field(default=3, ge=1, le=16)
    """Candidates one inference round may try before it fails."""
    stages: list[StageConfig] = Field(default_factory=list)


class HealthConfig(Section):
    failure_threshold: int = Field(default=3, ge=1)
    """Consecutive failures that open a candidate's circuit."""
    cooldown: float = Field(default=5.0, gt=0)
    """Seconds an open circuit waits before it lets one probe request through."""
    jitter: float = Field(default=0.1, ge=0, le=1)
    """The cool-down is lengthened by up to this fraction of itself, at random."""
    max_retry_after: float = Field(default=60.0, gt=0)
    """The longest ``Retry-After`` (429 or 503) that keeps a circuit open, in seconds; a
    longer one is taken as this, so a day asked by a proxy's maintenance page does not
    take the candidate out of its route until a reload."""
    active_probe: bool = False
    """Also ``GET /models`` on every candidate's backend, every ``probe_interval``."""
    probe_interval: float = Field(default=10.0, gt=0)
    """Seconds between two active probes; also the longest wait between two asks of a
    model server whose context windows are to be learned (``discover_context_window``)."""


def check_routes(
    routes: Sequence[RouteConfig],
    aliases: Mapping[str, str],
    backends: Mapping[str, Mapping[str, str]],
    catch_alls: Sequence[str],
    gateway_tools: Mapping[str, object],
) -> None:
    """Raise :class:`ValueError` naming the first problem. ``backends``: each backend's
    model map; ``catch_alls``: the backends serving every name (none named by a route);
    ``gateway_tools``: each backend's (a route's candidates must offer the same)."""
    served: dict[str, str] = {}
    for backend, models in backends.items():
        for model in models:
            served[model] = f"backend '{backend}'"
    for route in routes:
        if route.name in served:
            raise ValueError(
                f"route '{route.name}': the name is also served by {served[route.name]}"
            )
        served[route.name] = f"route '{route.name}'"
        for index, candidate in enumerate(route.candidates):
            if candidate.backend not in backends:
                raise ValueError(
                    f"route '{route.name}': candidates[{index}]: unknown backend "
                    f"'{candidate.backend}'"
                )
        offered = {c.backend: gateway_tools[c.backend] for c in route.candidates}
        first = route.candidates[0].backend
        other = next((b for b, tools in offered.items() if tools != offered[first]), None)
        if other is not None:
            raise ValueError(
                f"route '{route.name}': backends '{first}' and '{other}' offer different "
                "gateway_tools; a route's candidates must offer the same"
            )
    defaults = [r.name for r in routes if r.default]
    if len(defaults) > 1:
        raise ValueError(f"only one route may be the default; these are: {', '.join(defaults)}")
    if defaults and catch_alls:
        raise ValueError(
            f"route '{defaults[0]}' is the default, but backend '{catch_alls[0]}' also serves "
            "every model (empty 'models'); give it models or name it in a route"
        )
    for alias in aliases:
        if alias in served:
            raise ValueError(f"alias '{alias}': the name is also served by {served[alias]}")
    for alias in aliases:
        resolve_alias(alias, aliases, served, open_ended=bool(defaults or catch_alls))


def resolve_alias(
    name: str, aliases: Mapping[str, str], served: Mapping[str, object], *, open_ended: bool
) -> str:
    """The served name ``name`` leads to through aliases; :class:`ValueError` on a cycle or
    an unknown target. ``open_ended``: a default route or a catch-all backend serves every
    other name, so any target is served (a catch-all asks its upstream for the target)."""
    seen = [name]
    current = name
    while current in aliases:
        current = aliases[current]
        if current in seen:
            raise ValueError(f"alias '{name}': cycle {' -> '.join([*seen, current])}")
        seen.append(current)
    if current not in served and not open_ended:
        raise ValueError(f"alias '{seen[-2]}': unknown target '{current}'")
    return current
