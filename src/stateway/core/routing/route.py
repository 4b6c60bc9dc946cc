"""A route: the candidates that may serve one public model name, and how to choose."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from stateway.core.backend import Backend, ChatForwarder
from stateway.core.routing.windows import ServerWindows
from stateway.core.stages.chain import StageChain
from stateway.core.tools.toolset import Toolset


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a candidate can do; everything unless its configuration says otherwise."""

    images: bool = True
    files: bool = True
    reasoning: bool = True
    tool_calls: bool = True
    parallel_tool_calls: bool = True
    context_window: int | None = None
    """Input tokens the model takes, as configured; None: as its server advertises
    (:attr:`Candidate.context_window`)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A backend and the name its upstream knows the model by."""

    backend: Backend
    model: str
    """Empty for a catch-all backend's candidate until a model name is routed to it."""
    weight: float = 1.0
    priority: int = 0
    capabilities: Capabilities = Capabilities()
    learned: ServerWindows | None = field(default=None, compare=False, repr=False)
    """What its model server advertised of its windows (:mod:`.windows`); None: not asked
    (``discover_context_window = false``, or a window configured)."""
    key: str = field(init=False, compare=False, repr=False)
    """How logs, attempts, health and affinity name it: ``backend/model``."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", f"{self.backend.name}/{self.model}")

    @property
    def context_window(self) -> int | None:
        """The input tokens it takes: as configured, else as its model server advertised
        (learned while serving: read at each use), else None (not checked)."""
        configured = self.capabilities.context_window
        if configured is not None or self.learned is None:
            return configured
        return self.learned.window(self.model)


@dataclass(frozen=True, slots=True)
class Route:
    name: str
    candidates: tuple[Candidate, ...]
    """In configuration order (the order of errors when none can serve)."""
    gateway_tools: Toolset | None = None
    """The gateway tools offered to Chat Completions and Messages clients (hidden rounds)."""
    forwarder: ChatForwarder | None = None
    """Set when a Chat Completions request may go to the only candidate untouched."""
    affinity: bool = True
    """Continuations prefer the candidate that served their parent."""
    affinity_tolerance: float = 0.5
    max_attempts: int = 3
    stages: StageChain | None = None
    """The global feature stages, then the route's own."""

    @property
    def backend(self) -> Backend:
        """The first candidate's backend (counting tokens, forwarding)."""
        return self.candidates[0].backend

    @property
    def upstream_model(self) -> str:
        return self.candidates[0].model

    @property
    def context_window(self) -> int | None:
        """The most input tokens the route takes: its candidates' largest window, once
        every candidate's is known, configured or learned (a request over one window goes
        on to a candidate whose window holds it: before asking, by :mod:`.needs`, for a
        configured window; by the server's refusal, which fails over, for a learned one);
        None when any is unknown."""
        windows = [c.context_window for c in self.candidates]
        known = [window for window in windows if window is not None]
        return max(known) if known and len(known) == len(windows) else None

    def serving(self, model: str) -> Route:
        """This catch-all route serving ``model``: each candidate asks its upstream for it."""
        candidates = tuple(replace(c, model=model) for c in self.candidates)
        return replace(self, name=model, candidates=candidates)


@dataclass(frozen=True, slots=True)
class ListedModel:
    """A model name a request may name, as the model listings show it."""

    name: str
    backend: str
    """The name of its route's first candidate's backend (OpenAI's ``owned_by``)."""
    context_window: int | None = None
    """Its route's :attr:`Route.context_window` (Anthropic's ``max_input_tokens``)."""


def single_route(
    name: str,
    backend: Backend,
    model: str,
    gateway_tools: Toolset | None = None,
    stages: StageChain | None = None,
    capabilities: Capabilities = Capabilities(),
    learned: ServerWindows | None = None,
) -> Route:
    """A route of one candidate (a backend's own model name, or the catch-all). A learned
    window, unlike a configured one, keeps it on the Chat Completions fast path."""
    plain = gateway_tools is None and not stages and capabilities == Capabilities()
    forwarder = backend if isinstance(backend, ChatForwarder) and plain else None
    candidate = Candidate(backend, model, capabilities=capabilities, learned=learned)
    return Route(name, (candidate,), gateway_tools, forwarder, stages=stages)


@dataclass(slots=True, frozen=True)
class BackendEntry:
    """A backend and the model names it declares: each a route of one candidate, or,
    with ``catch_all``, the route of every other name."""

    backend: Backend
    models: dict[str, str]
    """Public model name -> upstream model name. Empty with ``catch_all``."""
    catch_all: bool = False
    gateway_tools: Toolset | None = None
    """The backend's ``gateway_tools``, resolved; None when it has none."""
    stages: StageChain | None = None
    """The global feature stages."""
    capabilities: Capabilities = Capabilities()
    """Its candidates' (the backend's ``context_window``)."""
    learned: ServerWindows | None = None
    """Its candidates' :attr:`Candidate.learned`."""

    def catch_all_route(self) -> Route:
        return self._route("", "")

    def routes(self) -> list[Route]:
        return [self._route(public, upstream) for public, upstream in self.models.items()]

    def _route(self, name: str, model: str) -> Route:
        tools, stages, capabilities = self.gateway_tools, self.stages, self.capabilities
        return single_route(name, self.backend, model, tools, stages, capabilities, self.learned)
