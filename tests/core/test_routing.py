import pytest

from stateway.core.commands import CheckReadiness
from stateway.core.errors import GatewayError, ModelNotFound, UpstreamUnavailable
from stateway.core.gateway import Gateway
from stateway.core.loop import Loop
from stateway.core.principal import Principal
from stateway.core.routing import BackendEntry, Candidate, Capabilities, Route, Router
from stateway.core.routing.route import ListedModel
from stateway.core.run_registry import RunRegistry
from tests.core.fakes import MemoryStore, ScriptedBackend


class Named(ScriptedBackend):
    def __init__(self, name: str, models: list[str] | None = None) -> None:
        super().__init__([])
        self.name = name
        self._models = models

    async def list_models(self) -> list[str]:
        if self._models is None:
            raise UpstreamUnavailable("down")
        return self._models


def test_exact_names_win_over_catch_all_and_earlier_over_later() -> None:
    a, b, c = Named("a"), Named("b"), Named("c")
    router = Router(
        [
            BackendEntry(a, {"small": "small-v2"}),
            BackendEntry(b, {"small": "other", "big": "big"}),
            BackendEntry(c, {}, catch_all=True),
        ]
    )
    assert (router.resolve("small").backend, router.resolve("small").upstream_model) == (
        a,
        "small-v2",
    )
    assert router.resolve("big").backend is b
    assert (router.resolve("anything").backend, router.resolve("anything").upstream_model) == (
        c,
        "anything",
    )


def test_unknown_model_without_catch_all() -> None:
    router = Router([BackendEntry(Named("a"), {"x": "x"})])
    with pytest.raises(ModelNotFound) as caught:
        router.resolve("y")
    assert caught.value.status == 404
    assert caught.value.param == "model"


async def test_model_listing_skips_unreachable_upstreams() -> None:
    up = Router(
        [
            BackendEntry(Named("a"), {"x": "x"}),
            BackendEntry(Named("up", ["m1", "x"]), {}, catch_all=True),
        ]
    )
    assert await up.list_models() == [ListedModel("x", "a"), ListedModel("m1", "up")]
    down = Router(
        [BackendEntry(Named("a"), {"x": "x"}), BackendEntry(Named("down"), {}, catch_all=True)]
    )
    assert await down.list_models() == [ListedModel("x", "a")]
    assert issubclass(UpstreamUnavailable, GatewayError)


async def test_readiness_reports_each_upstream_and_storage() -> None:
    router = Router(
        [BackendEntry(Named("down"), {"x": "x"}), BackendEntry(Named("up", []), {"y": "y"})]
    )
    store = MemoryStore()
    gateway = Gateway(store, router, Loop(store), RunRegistry())
    ready = await gateway.execute(Principal(), CheckReadiness())
    assert (ready.storage_error, ready.upstreams) == (None, {"down": False, "up": True})


async def test_a_model_is_found_when_a_configured_route_or_the_listing_has_it() -> None:
    named = Router([BackendEntry(Named("a"), {"x": "x"})], aliases={"y": "x"})
    assert await named.find_model("x") == ListedModel("x", "a")
    assert await named.find_model("y") == ListedModel("y", "a")
    with pytest.raises(ModelNotFound):
        await named.find_model("z")
    default = named.resolve("x")
    fallback = Router([BackendEntry(Named("a"), {"x": "x"})], default=default)
    assert await fallback.find_model("anything") == ListedModel("anything", "a")  # the default

    catch_all = Router(
        [
            BackendEntry(Named("a"), {"x": "x"}),
            BackendEntry(Named("up", ["m1"]), {}, catch_all=True),
        ]
    )
    assert await catch_all.find_model("x") == ListedModel("x", "a")
    assert await catch_all.find_model("m1") == ListedModel("m1", "up")

    with pytest.raises(ModelNotFound) as caught:  # served, but not known to exist upstream
        await catch_all.find_model("m2")
    assert caught.value.code == "model_not_found"


def test_an_alias_to_a_model_of_the_catch_all_asks_its_upstream_for_the_target() -> None:
    router = Router([BackendEntry(Named("up", ["m1"]), {}, catch_all=True)], aliases={"fast": "m1"})
    route = router.resolve("fast")
    assert [c.model for c in route.candidates] == ["m1"]
    assert router.resolve("other").candidates[0].model == "other"


def windowed(name: str, window: int | None) -> Candidate:
    return Candidate(Named(name), "m", capabilities=Capabilities(context_window=window))


def test_a_route_s_context_window_is_its_largest_once_every_candidate_declares_one() -> None:
    """A context over one candidate's window goes to another whose window holds it (the
    largest bounds what the route takes); one candidate of unknown window leaves the
    route's unknown."""
    assert Route("r", (windowed("a", 8192), windowed("b", 32768))).context_window == 32768
    assert Route("r", (windowed("a", 8192), windowed("b", None))).context_window is None
    assert Route("r", (windowed("a", None),)).context_window is None


async def test_the_listing_tells_each_model_s_context_window() -> None:
    """A backend's ``context_window``, for its names, its aliases and what its upstream
    reports (a catch-all); unknown (None) where it declares none."""
    window = Capabilities(context_window=4096)
    router = Router(
        [
            BackendEntry(Named("a"), {"x": "x"}, capabilities=window),
            BackendEntry(Named("b"), {"y": "y"}),
            BackendEntry(Named("up", ["m1"]), {}, catch_all=True, capabilities=window),
        ],
        aliases={"z": "x"},
    )
    assert await router.list_models() == [
        ListedModel("x", "a", 4096),
        ListedModel("y", "b", None),
        ListedModel("z", "a", 4096),
        ListedModel("m1", "up", 4096),
    ]
    assert await router.find_model("z") == ListedModel("z", "a", 4096)
    assert await router.find_model("m1") == ListedModel("m1", "up", 4096)
