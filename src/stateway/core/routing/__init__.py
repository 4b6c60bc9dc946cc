"""Routing: model name -> route -> candidates -> attempts.

- :mod:`.route`: a route, its candidates (backend + upstream model, weight, priority,
  capabilities);
- :mod:`.router`: names and aliases to routes, a request to its :class:`Plan`;
- :mod:`.needs`: capability negotiation (what a request needs of a candidate);
- :mod:`.plan`: each round's order of candidates, failover before the first delta;
- :mod:`.attempts`: an attempt's record, and which failures move on;
- :mod:`.windows`: context windows learned from the model servers.
"""

from stateway.core.routing.attempts import Attempt, recoverable
from stateway.core.routing.needs import Needs
from stateway.core.routing.plan import Plan
from stateway.core.routing.route import BackendEntry, Candidate, Capabilities, Route, single_route
from stateway.core.routing.router import Router

__all__ = [
    "Attempt",
    "BackendEntry",
    "Candidate",
    "Capabilities",
    "Needs",
    "Plan",
    "Route",
    "Router",
    "recoverable",
    "single_route",
]
