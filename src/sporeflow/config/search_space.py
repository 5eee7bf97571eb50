"""An Optuna search space from Hydra's sweep syntax: the sweeper's `params` and the command line.

Sources, later ones winning for the same key (the official Hydra Optuna sweeper's rules):
- `hydra.sweeper.params`, flat (`boost.rho: interval(0.3, 0.8)`) or nested (`boost: {rho: ...}`,
  which is what makes `~hydra.sweeper.params.boost.rho` work on the command line);
- a command-line sweep override (`boost.rho='interval(0.3,0.8)'`, `boost.rho=0.4,0.6`,
  `choice(...)`, `range(...)`) adds or replaces a key of the space;
- a command-line value (`boost.rho=0.5`) fixes the key: it leaves the space and every job sees it.

`interval(a, b)` float, `int(interval(a, b))`, `tag(log, interval(a, b))`, `choice(x, y, ...)` or
`a,b,c` categorical, `range(a, b[, step])` ints from a to b-1 (Hydra's range: the end excluded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sporeflow.core.errors import ConfigError
from sporeflow.core.uris import database_problem, is_database, redacted, sqlite_file, sqlite_uri

SYNTAX = (
    "interval(a, b), int(interval(a, b)), tag(log, interval(a, b)), choice(x, y, ...), "
    "x,y,... or range(a, b)"
)
EXAMPLE = "python train.py -m hparams_search=dim_reduce_optuna 'boost.rho=interval(0.3, 0.8)'"
DIRECTIONS = ("maximize", "minimize")
SAMPLERS = ("tpe", "random", "grid")  # short forms; a `_target_` node names any optuna sampler
PRUNERS = ("none", "median", "hyperband")
SEED_STATISTICS = ("mean", "lcb")
OPTUNA_SWEEPER = "hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"


def storage_url(storage: str | None, launch_dir: Path) -> str | None:
    """`hydra.sweeper.storage` with a relative sqlite path made absolute (from the launch dir)."""
    path = sqlite_file(storage) if storage else None
    if path is not None and not path.is_absolute():
        return sqlite_uri((launch_dir / path).resolve())
    return storage


def flatten(params: Mapping[str, Any] | None, prefix: str = "") -> dict[str, str]:
    """Nested `params` -> {"boost.rho": "interval(0.3, 0.8)"} (dotted keys as they are)."""
    flat: dict[str, str] = {}
    for key, value in (params or {}).items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten(value, f"{path}."))
        elif value is not None:  # `hydra.sweeper.params.boost.rho=null` drops the key too
            flat[path] = str(value)
    return flat


@dataclass
class SearchSpace:
    """What the sweeper searches (spec strings by key) and what every job gets as it is."""

    specs: dict[str, str] = field(default_factory=dict)
    # the command line in its order: a fixed override's line, or None where a searched key goes
    order: list[tuple[str, str | None]] = field(default_factory=list)
    sampler: Any = None  # the checked `hydra.sweeper.sampler` (optuna_sampler.SamplerSpec)
    custom: Any = None  # the checked `custom_search_space` (optuna_sampler.FunctionPath) or None

    @property
    def keys(self) -> list[str]:
        return list(self.specs)

    @property
    def fixed(self) -> list[str]:
        return [line for _, line in self.order if line is not None]

    def sets(self, key: str) -> bool:
        """Whether the command line or the space gives `key` a value (swept or fixed)."""
        return key in self.specs or any(k == key for k, _ in self.order)

    def distributions(self) -> dict[str, Any]:
        return {key: distribution(key, spec) for key, spec in self.specs.items()}

    def job_overrides(self, params: Mapping[str, Any]) -> list[str]:
        """A job's overrides: the command line's order with each searched key's value in its
        place, then the keys that came from `params`."""
        placed = {key for key, line in self.order if line is None}
        return [
            *(line if line is not None else f"{key}={params[key]}" for key, line in self.order),
            *(f"{key}={params[key]}" for key in self.specs if key not in placed),
            # those a custom_search_space suggested (`+w` adds a key, as the official plugin's)
            *(f"{key}={value}" for key, value in params.items() if key not in self.specs),
        ]


def build(params: Mapping[str, Any] | None, arguments: Iterable[str]) -> SearchSpace:
    """The space of `params` with the command line's sweeps added and its fixed keys removed."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    space = SearchSpace(specs=flatten(params))
    for override in OverridesParser.create().parse_overrides(list(arguments)):
        line = str(override.input_line)
        for key in [k for k in space.specs if k.lstrip("+~") == override.key_or_group]:
            del space.specs[key]  # the command line wins over `params`
        if override.is_sweep_override():
            # the key as written (`+a` adds a key the config lacks), the spec after the first =
            key = override.get_key_element()
            space.specs[key] = line.split("=", 1)[1]
            space.order.append((key, None))
        else:
            space.order.append((override.key_or_group, line))
    return space


def checked(
    settings: Mapping[str, Any], arguments: Iterable[str], roots: Sequence[Path] | None = None
) -> SearchSpace:
    """The Optuna sweeper's settings (`hydra.sweeper`) and search space, or a ConfigError naming
    the key: called by the sweeper, and before a sweep's MLflow parent run exists (sweep_run).
    The sampler's `_target_` and the custom_search_space's module are checked as data: nothing
    of theirs is imported or built here. `roots`: where the sweep's own code lives
    (optuna_sampler.project_roots; the working folder if not given)."""
    from sporeflow.config import optuna_sampler

    sampler = optuna_sampler.checked_sampler(settings.get("sampler", "tpe"))
    custom = optuna_sampler.checked_search_space(
        settings.get("custom_search_space"), roots or [Path.cwd()]
    )
    check_direction(settings.get("direction"))
    if settings.get("pruner", "none") not in PRUNERS:
        raise ConfigError(
            f"hydra.sweeper.pruner={settings.get('pruner')!r}: allowed are {', '.join(PRUNERS)}"
        )
    for key in ("n_trials", "n_jobs", "heartbeat_interval"):
        if settings[key] < 1:
            raise ConfigError(f"hydra.sweeper.{key}={settings[key]}: must be >= 1")
    if settings.get("pruner_min_epochs", 1) < 1:
        raise ConfigError(
            f"hydra.sweeper.pruner_min_epochs={settings['pruner_min_epochs']}: must be >= 1"
        )
    if settings.get("pruner", "none") != "none" and not settings.get("storage"):
        raise ConfigError(
            f"hydra.sweeper.pruner={settings['pruner']} needs a hydra.sweeper.storage (the jobs "
            "report their progress to the study there); null keeps the study in memory"
        )
    if not 0.0 <= settings["max_failure_rate"] <= 1.0:
        raise ConfigError(
            f"hydra.sweeper.max_failure_rate={settings['max_failure_rate']}: must be in [0, 1]"
        )
    storage = settings.get("storage") or ""
    if is_database(storage):
        problem = database_problem(storage)
        if problem:
            raise ConfigError(
                f"hydra.sweeper.storage={redacted(storage)}: cannot connect: {problem}"
            )
    space = build(settings.get("params"), arguments)
    space.sampler, space.custom = sampler, custom
    if not space.specs and not sampler.grid and custom is None:
        raise ConfigError(
            "hydra.sweeper.params is empty and the command line sweeps nothing: name a key to "
            f"search, e.g. {EXAMPLE}"
        )
    distributions = space.distributions()  # a bad spec fails here, naming its key
    if sampler.grid:
        grid(distributions, f"hydra.sweeper.sampler={sampler.label}")
    check_seeds(settings, space)
    return space


def check_direction(direction: Any) -> None:
    """`hydra.sweeper.direction`: null, a word, or a list of words (a multi-objective study,
    one per value the job returns), else a ConfigError."""
    words = [direction] if direction is None or isinstance(direction, str) else list(direction)
    if (
        not words
        or any(d not in (None, *DIRECTIONS) for d in words)
        or (len(words) > 1 and None in words)
    ):
        raise ConfigError(
            f"hydra.sweeper.direction={direction!r}: allowed are {', '.join(DIRECTIONS)} or a "
            "list of them (one per objective)"
        )


def check_seeds(settings: Mapping[str, Any], space: SearchSpace) -> None:
    """`hydra.sweeper.seeds` (a trial is one job per seed) and `seed_statistic`, or a
    ConfigError naming the key."""
    statistic = settings.get("seed_statistic", "mean")
    if statistic not in SEED_STATISTICS:
        raise ConfigError(
            f"hydra.sweeper.seed_statistic={statistic!r}: allowed are {', '.join(SEED_STATISTICS)}"
        )
    seeds = settings.get("seeds")
    if seeds is None:
        return
    seeds = list(seeds)
    if not seeds:
        raise ConfigError("hydra.sweeper.seeds=[]: name the seeds each trial runs, e.g. [1,2,3]")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:
        raise ConfigError(f"hydra.sweeper.seeds={seeds}: seed {repeated[0]} is named twice")
    if statistic == "lcb" and len(seeds) < 2:
        raise ConfigError(
            f"hydra.sweeper.seed_statistic=lcb needs at least 2 seeds (hydra.sweeper.seeds={seeds})"
        )
    if space.sets("seed"):
        raise ConfigError(
            f"seed is set both on the command line (or in hydra.sweeper.params) and by "
            f"hydra.sweeper.seeds={seeds}: drop one"
        )
    if settings.get("pruner", "none") != "none":
        raise ConfigError(
            f"hydra.sweeper.pruner={settings['pruner']} with hydra.sweeper.seeds: a trial of "
            "several seeds is not pruned by one of them; use pruner=none"
        )


def grid(
    distributions: Mapping[str, Any],
    who: str = "hydra.sweeper.sampler=grid",
    instead: str = "use sampler=tpe / random",
) -> list[dict[str, Any]]:
    """Every point of a finite space in command-line order (the first key varies slowest, as in
    Hydra's BasicSweeper); an empty space is one point. ConfigError for a continuous key,
    naming `who` needs a grid and what to do `instead`."""
    import itertools

    import optuna.distributions as d

    values = {}
    for key, dist in distributions.items():
        if isinstance(dist, d.CategoricalDistribution):
            values[key] = list(dist.choices)
        elif isinstance(dist, d.IntDistribution) and not dist.log:
            values[key] = list(range(dist.low, dist.high + 1, dist.step))
        elif isinstance(dist, d.FloatDistribution) and dist.step is not None:
            # range(a, b, step=s) of floats: a, a+s, ... below b (Hydra's range, the end excluded)
            count = round((dist.high - dist.low) / dist.step)
            values[key] = [dist.low + i * dist.step for i in range(count)]
        else:
            raise ConfigError(
                f"{who}: {key} is continuous; a grid takes choice(...), "
                f"x,y,... or range(a, b) (or {instead})"
            )
    return [dict(zip(values, point, strict=False)) for point in itertools.product(*values.values())]


def distribution(key: str, spec: str) -> Any:
    """Hydra sweep syntax -> an Optuna distribution (ConfigError naming the key otherwise)."""
    import optuna.distributions as d
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

    try:
        value = OverridesParser.create().parse_override(f"{key}={spec}").value()
    except Exception as ex:
        raise ConfigError(f"hydra.sweeper.params.{key}={spec!r}: {ex}") from ex
    if isinstance(value, ChoiceSweep):
        return d.CategoricalDistribution(list(value.list))  # type: ignore[arg-type]  # Hydra's values are Optuna's choices
    if isinstance(value, RangeSweep) and value.start is not None and value.stop is not None:
        start, stop, step = value.start, value.stop, value.step
        if isinstance(start, int) and isinstance(stop, int) and isinstance(step, int):
            return d.IntDistribution(start, stop - 1, step=step)
        return d.FloatDistribution(start, stop, step=step)
    if isinstance(value, IntervalSweep) and value.start is not None and value.end is not None:
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return d.IntDistribution(value.start, value.end, log=log_scale)
        return d.FloatDistribution(float(value.start), float(value.end), log=log_scale)
    raise ConfigError(f"hydra.sweeper.params.{key}={spec!r}: not a search space; use {SYNTAX}")
