"""Feature stages from the configuration: each ``[[stages]]`` / ``[[routes.stages]]``
entry names an entry point in the group ``stateway.stages``, whose factory is called as
``factory(**options)``. A name with no entry point, one that fails to import, a factory
that refuses its options, or an object handling no stage point is a :class:`ConfigError`
naming the stage."""

from __future__ import annotations

from importlib.metadata import entry_points

from stateway.config import Config, ConfigError
from stateway.core.stages.chain import Stage, StageChain
from stateway.core.stages.context import POINTS
from stateway.route_config import StageConfig

GROUP = "stateway.stages"


def load_stage(config: StageConfig, where: str) -> Stage:
    found = entry_points(group=GROUP, name=config.name)
    if not found:
        raise ConfigError(f"{where}: stage '{config.name}': no entry point in group {GROUP}")
    [entry] = list(found)[:1]
    try:
        factory = entry.load()
    except Exception as exc:  # noqa: BLE001 - foreign code failing to import
        raise ConfigError(f"{where}: stage '{config.name}' failed to load: {exc!r}") from None
    try:
        impl = factory(**config.options)
    except Exception as exc:  # noqa: BLE001 - foreign code refusing its options
        raise ConfigError(f"{where}: stage '{config.name}': options refused: {exc}") from None
    stage = Stage(config.name, impl, config.on_error)
    if not any(stage.handles(point) for point in POINTS):
        raise ConfigError(f"{where}: stage '{config.name}' handles no stage point")
    return stage


def load_chain(
    config: Config, route: list[StageConfig] | None = None, where: str = ""
) -> StageChain:
    """The global stages, then ``route``'s own."""
    stages = [load_stage(s, "stages") for s in config.stages]
    stages += [load_stage(s, where) for s in route or []]
    return StageChain(stages)
