"""The race sweeper's settings (`hydra/sweeper=sporeflow_race`) and its grid of points, checked
before any job starts: by the sweeper, and by the sweep's callback before its MLflow parent run
exists (entry.sweep_run).

A race runs every point of a grid (`hydra.sweeper.params` plus the command line's sweeps, the
Optuna sweeper's syntax and rules: config.search_space) on seed 1, then every point still in on
seed 2, and so on up to `max_seeds`; the plugin (hydra_plugins/sporeflow_race_sweeper) drops the
points shown worse after each round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sporeflow.config import search_space
from sporeflow.core.errors import ConfigError

RACE_SWEEPER = "hydra_plugins.sporeflow_race_sweeper.race_sweeper.RaceSweeper"
EXAMPLE = "python train.py -m hparams_search=dim_reduce_race"


@dataclass(frozen=True)
class Race:
    space: search_space.SearchSpace
    points: list[dict[str, Any]]  # the grid, in BasicSweeper's order
    seeds: list[int]  # round r runs seeds[r - 1]


def checked(settings: Mapping[str, Any], arguments: Iterable[str]) -> Race:
    """The race's space, points and seeds, or a ConfigError naming the key."""
    for key, least in (("max_seeds", 2), ("first_test", 2)):
        if settings[key] < least:
            raise ConfigError(f"hydra.sweeper.{key}={settings[key]}: must be >= {least}")
    if not 0.0 < settings["alpha"] < 1.0:
        raise ConfigError(f"hydra.sweeper.alpha={settings['alpha']}: must be in (0, 1)")
    direction = settings.get("direction")
    if direction not in (None, *search_space.DIRECTIONS):
        raise ConfigError(
            f"hydra.sweeper.direction={direction!r}: allowed are "
            + ", ".join(search_space.DIRECTIONS)
        )
    space = search_space.build(settings.get("params"), arguments)
    if space.sets("seed"):
        raise ConfigError(
            "seed is set on the command line (or in hydra.sweeper.params) of a race: the race "
            f"picks the seeds (1..hydra.sweeper.max_seeds={settings['max_seeds']}); drop it"
        )
    points = search_space.grid(
        space.distributions(), "a race (hydra/sweeper=sporeflow_race)", "race a few values of it"
    )
    if len(points) < 2:
        raise ConfigError(
            f"a race needs at least 2 points, the grid has {len(points)}: sweep a key with "
            f"hydra.sweeper.params or the command line (e.g. {EXAMPLE} boost.rho=0.4,0.7)"
        )
    first_seed = settings.get("first_seed", 1)
    return Race(space, points, list(range(first_seed, first_seed + settings["max_seeds"])))
