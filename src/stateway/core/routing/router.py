"""The router: a model name, through aliases, to its route; a request to its plan.

Names resolve in this order: a route's own name (a ``[[routes]]`` entry, or a model name
a backend declares), then an alias (followed to its route), then the default route: a
``[[routes]]`` entry marked ``default``, or the catch-all backend's route, whose
candidate asks its upstream for the requested name itself.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Mapping

from stateway.core.backend import Backend
from stateway.core.errors import GatewayError, InvalidRequest, ModelNotFound
from stateway.core.routing.attempts import Attempt
from stateway.core.routing.health import HealthBoard, HealthPolicy
from stateway.core.routing.needs import Needs, Unmet, unmet
from stateway.core.routing.plan import Plan, RoutingState
from stateway.core.routing.route import BackendEntry, Candidate, ListedModel, Route

log = logging.getLogger(__name__)


_SHAPES = InvalidRequest("Shell and apply_patch tools go to every candidate of a run in one shape.")
"""Never raised: a candidate of the other API shape than the run's first is skipped."""


class Router:
    def __init__(
        self,
        entries: list[BackendEntry] | None = None,
        *,
        routes: list[Route] | None = None,
        aliases: Mapping[str, str] | None = None,
        default: Route | None = None,
        catch_all: bool = False,
        rng: random.Random | None = None,
        clock: Callable[[], float] = time.monotonic,
        health: HealthPolicy | None = None,
        upstreams: Mapping[str, object] | None = None,
    ) -> None:
        """``entries``: backends declaring their model names (and the catch-all backend);
        ``routes``: configured routes; ``catch_all``: the ``default`` route serves each
        name as its upstream's own. Earlier declarations of a name win. ``upstreams``:
        what each backend, by name, is configured as (compared by :meth:`follow`: equal
        settings are the same server, called the same way)."""
        self._upstreams = dict(upstreams or {})
        self._routes: dict[str, Route] = {}
        for entry in entries or []:
            for route in entry.routes():
                self._routes.setdefault(route.name, route)
            if entry.catch_all and default is None:
                default, catch_all = entry.catch_all_route(), True
        for route in routes or []:
            self._routes.setdefault(route.name, route)
        self._aliases = dict(aliases or {})
        self._default = default
        self._catch_all = catch_all
        self._served: dict[str, Route] = {}
        """The catch-all route serving each name asked for, made once (up to
        ``_MAX_SERVED`` names; past that each is made per request)."""
        rng = rng or random.Random()
        kept = [key for keys in self.candidates_by_backend().values() for key in keys]
        board = HealthBoard(health, clock=clock, rng=rng, kept=kept)
        self.state = RoutingState(rng, clock, board)
        """Health, affinity and load, shared by every plan."""

    def follow(self, previous: Router) -> None:
        """Take over what ``previous`` (the superseded generation's router) learned that
        still holds: its affinity table (chains stay where their prefix is cached), and
        the circuits of the backends configured exactly as before (a reload adding an
        alias must not send requests back to a server known to be down). A backend
        configured anew (its URL, key or any other setting) starts with closed circuits:
        the change may have mended it."""
        self.state.affinity = previous.state.affinity
        unchanged = {
            name
            for name, made in self._upstreams.items()
            if name in previous._upstreams and previous._upstreams[name] == made
        }

        def kept(key: str) -> bool:  # a candidate key is "<backend>/<model>"
            owners = [name for name in previous._upstreams if key.startswith(f"{name}/")]
            return bool(owners) and all(name in unchanged for name in owners)

        self.state.health.adopt(previous.state.health, kept)

    @property
    def backends(self) -> list[Backend]:
        """Every backend a route names, once, in order."""
        seen: dict[str, Backend] = {}
        routes = [*self._routes.values(), *([self._default] if self._default else [])]
        for route in routes:
            for candidate in route.candidates:
                seen.setdefault(candidate.backend.name, candidate.backend)
        return list(seen.values())

    def names(self) -> list[str]:
        """The model names configured: routes, backends' models and aliases (not those a
        catch-all backend serves because a client asked for them)."""
        return [*self._routes, *self._aliases]

    def candidates_by_backend(self) -> dict[Backend, list[str]]:
        """The candidate keys of each backend, over every route with fixed model names."""
        keys: dict[Backend, list[str]] = {}
        routes = list(self._routes.values())
        if self._default is not None and not self._catch_all:
            routes.append(self._default)
        for route in routes:
            for candidate in route.candidates:
                found = keys.setdefault(candidate.backend, [])
                if candidate.key not in found:
                    found.append(candidate.key)
        return keys

    def resolve(self, model: str) -> Route:
        name = model
        for _ in range(len(self._aliases) + 1):  # aliases are checked for cycles up front
            route = self._routes.get(name)
            if route is not None:
                return route
            if name not in self._aliases:
                break
            name = self._aliases[name]
        if self._default is None:
            raise ModelNotFound(model)
        if not self._catch_all:
            return self._default
        route = self._served.get(name)  # an alias's target, asked for by that name
        if route is None:
            route = self._default.serving(name)
            if len(self._served) < _MAX_SERVED:
                self._served[name] = route
        return route

    def plan(
        self,
        route: Route,
        needs: Needs,
        chain: list[str] | None = None,
        stored: str | None = None,
    ) -> Plan:
        """The run's plan over the candidates able to serve ``needs``. Raises the first
        candidate's reason (a 400 naming what is missing) when none can. ``chain``: the
        names the request's chain is known by (:func:`.affinity.chain_names`);
        ``stored``: the candidate that served it last, as stored (the hint the affinity
        table falls back to). Parallel calls are not a need a route refuses: a request
        that allows them goes to the candidates that make them, or, when none can serve
        it, to those that serve it one call per round. Nor are tools and items of types
        the gateway does not model: a request holding them goes to the candidates that
        carry them (an upstream speaking Responses), or, when none can serve it, to those
        whose model is not shown them (:mod:`.needs`); a plan never mixes the two."""
        for serial, withholding in _PASSES:
            if serial and not needs.parallel_tool_calls:
                continue  # the same candidates as the pass before
            candidates, skipped, first_unmet = self._capable(
                route, needs, serial=serial, withholding=withholding
            )
            if candidates:
                break
        else:
            assert first_unmet is not None
            raise first_unmet.error
        for attempt in skipped:
            log.info("route %s: skipped %s (%s)", route.name, attempt.candidate, attempt.detail)
        return Plan(route, candidates, self.state, skipped=skipped, chain=chain, stored=stored)

    def _capable(
        self, route: Route, needs: Needs, *, serial: bool, withholding: bool
    ) -> tuple[list[Candidate], list[Attempt], Unmet | None]:
        """The candidates able to serve ``needs`` (one call per round if ``serial``; not
        shown its unmodelled types if ``withholding``), the others' skipped attempts, and
        the first one's reason."""
        capable: list[Candidate] = []
        skipped: list[Attempt] = []
        first_unmet: Unmet | None = None
        now = self.state.clock()
        for candidate in route.candidates:
            problem = unmet(route.name, candidate, needs, serial=serial, withholding=withholding)
            if (
                problem is None
                and needs.client_hosted
                and capable
                and _shape(candidate, capable[0])
            ):
                problem = Unmet("tool_shapes", _SHAPES)
            if problem is None:
                capable.append(candidate)
                continue
            first_unmet = first_unmet or problem
            attempt = Attempt(route.name, candidate.key, 0, now, "skipped", problem.capability)
            attempt.latency_ms = 0.0
            skipped.append(attempt)
        return capable, skipped, first_unmet

    async def list_models(self) -> list[ListedModel]:
        """Every route and alias and, for a catch-all backend, every name its upstream
        reports. An unreachable upstream contributes nothing."""
        seen: dict[str, ListedModel] = {}
        for name in [*self._routes, *self._aliases]:
            seen.setdefault(name, self._listed(name, self.resolve(name)))
        if self._default is not None and self._catch_all:
            backend = self._default.backend
            try:
                names = await backend.list_models()
            except GatewayError as exc:
                log.warning("listing models of backend %s failed: %s", backend.name, exc)
                names = []
            for name in names:  # each with its own window, as its server advertised it
                seen.setdefault(name, self._listed(name, self._default.serving(name)))
        return list(seen.values())

    async def find_model(self, model: str) -> ListedModel:
        """A model a configured route serves (a name, an alias, a default route that is no
        catch-all) or the listing shows; else :class:`ModelNotFound`. A catch-all serves
        any name, but only those its upstream reports are known to exist."""
        if self._default is None or not self._catch_all:
            return self._listed(model, self.resolve(model))
        if model in self._routes or model in self._aliases:
            return self._listed(model, self.resolve(model))
        for listed in await self.list_models():
            if listed.name == model:
                return listed
        raise ModelNotFound(model)

    @staticmethod
    def _listed(name: str, route: Route) -> ListedModel:
        return ListedModel(name, route.backend.name, route.context_window)


_MAX_SERVED = 1024

_PASSES = ((False, False), (True, False), (False, True), (True, True))
"""``(serial, withholding)`` of the candidates a plan looks for, the most wanted first:
a request's tools and items all shown weigh more than its parallel calls."""


def _shape(candidate: Candidate, first: Candidate) -> bool:
    """Whether ``candidate`` speaks another API shape than ``first`` (shell and apply_patch
    tools go to an upstream speaking Responses natively, and as functions to the others)."""
    return candidate.backend.carries_unknown_types != first.backend.carries_unknown_types
