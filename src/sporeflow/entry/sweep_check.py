"""A sweep checked whole before its first job (issue 77): every point composed as its job will
be and checked as its job will check it, before a sweep dir, an MLflow parent run or an Optuna
trial exists. The first problem is one line naming the key, the point and what is allowed.

What is checked, by sweeper:
- Hydra's basic sweeper (a grid): every point (`hydra.sweeper.params` and the command line,
  expanded as BasicSweeper.split_arguments expands them, in its job order);
- `hydra/sweeper=sporeflow_optuna`: its settings (config.search_space.checked: the space, the
  sampler and its arguments, pruner, directions against `sweep.objective`), then every point of a
  grid sampler, else each searched key at each of its choices and at both ends of its range,
  the other keys at their first value (`edge_points`): a search's points are drawn later, but
  every value a range can give lies between its ends;
- `hydra/sweeper=sporeflow_race`: its settings and every point of its grid;
- with seeds (Optuna's `hydra.sweeper.seeds`, a race's rounds) the first point runs each seed;
- first of all the tracking store (a database that does not connect: tracking.store_refusal)
  and, for `cluster=slurm`, the launcher's settings and the sweep folder (launch.slurm).
Any other sweeper's points are its own: the command line's fixed values are still checked.

A point is composed by the sweep's own config loader (Hydra's `load_sweep_config`, as the
launcher composes the job), then checked as entry.app.run_job checks a job: its text settings as
typed, relative paths from the launch folder, `job.plan.plan_job` (config.validation.validate:
types, ranges, relations, the objective; the parallel plan) and `job.preflight.check_batch`
(the training split's size counted once per data set). Points are checked once each (a cache
by their overrides); composing comes first for all of them (no MindSpore needed), validating
after (the first validation imports MindSpore, with its log in `<sweep dir>/mindspore_log` as
a job would put it: the sweep's process keeps it for its in-process jobs; a refused sweep
leaves no folder).

Hydra turns an exception of a callback into a warning and goes on to make the sweep dir, so the
sweep's callback raises `SweepRefused` (a BaseException, which Hydra lets through) and
entry.sweep_run.end_unfinished - what train.py's run_cli and the Python API's `sweep` call on
any exception - raises the ConfigError it carries: exit 2 and its line.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from sporeflow.config import race, search_space
from sporeflow.config.facts import sweep_directions
from sporeflow.config.optuna_sampler import project_roots
from sporeflow.core.errors import ConfigError

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
POINT, BOUND = "sweep point", "search bound"  # a job's point; a point that bounds a search


class SweepRefused(BaseException):
    """A sweep its callback refused before its start: a BaseException because Hydra's callback
    runner turns an Exception into a warning and goes on (entry.sweep_run.end_unfinished raises
    the ConfigError it carries)."""

    def __init__(self, error: ConfigError) -> None:
        super().__init__(str(error))
        self.error = error


def check_sweep(config: DictConfig) -> None:
    """The whole sweep `config` (what Hydra hands on_multirun_start) checked before its first
    job; ConfigError with one line for the first problem."""
    from sporeflow.tracking.store import store_refusal

    problem = store_refusal(config.tracking.uri) if config.tracking.enabled else None
    problem = problem or slurm_refusal(config)  # a database every job would refuse; sbatch's
    if problem:
        raise ConfigError(problem)
    arguments = [str(a) for a in OmegaConf.to_container(config.hydra.overrides.task)]
    points, kind = sweep_points(config, arguments)
    Points(config, points, kind).check()


def slurm_refusal(config: DictConfig) -> str | None:
    """SLURM settings or a sweep folder the SLURM launcher refuses before submitting
    (launch.slurm), said before the sweep dir is made; None off a cluster."""
    from sporeflow.launch import slurm

    if "slurm" not in str(config.hydra.launcher.get("_target_", "")):
        return None
    launcher = OmegaConf.to_container(config.hydra.launcher, resolve=True)
    return slurm.requeue_refusal(launcher) or slurm.folder_refusal(str(config.hydra.sweep.dir))


def sweep_points(config: DictConfig, arguments: list[str]) -> tuple[list[list[str]], str]:
    """The jobs' overrides the sweep's sweeper will launch (or, for a search, the points that
    bound what it can draw: `edge_points`), after checking the sweeper's own settings; and what
    a refusal calls them (`sweep point`, `search bound`)."""
    target = config.hydra.sweeper.get("_target_")
    settings = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
    assert isinstance(settings, dict)
    if target == search_space.OPTUNA_SWEEPER:
        roots = project_roots(
            Path(config.hydra.runtime.cwd or Path.cwd()),
            OmegaConf.to_container(config.hydra.runtime.config_sources),  # type: ignore[arg-type]
        )
        space = search_space.checked(settings, arguments, roots)
        sweep_directions(config, settings.get("direction"))  # a list fits the objective
        distributions = space.distributions()
        grid = space.sampler.grid
        found = search_space.grid(distributions) if grid else edge_points(distributions)
        jobs = seeded([space.job_overrides(p) for p in found], settings.get("seeds") or [])
        return jobs, POINT if grid else BOUND
    if target == race.RACE_SWEEPER:
        checked = race.checked(settings, arguments)
        jobs = [checked.space.job_overrides(p) for p in checked.points]
        return seeded(jobs, checked.seeds), POINT
    if target == BASIC_SWEEPER:
        params = [f"{k}={v}" for k, v in (settings.get("params") or {}).items()]
        return grid_points([*params, *arguments]), POINT
    return [[a for a in arguments if not _sweeps(a)]], "fixed settings"


def grid_points(arguments: Sequence[str]) -> list[list[str]]:
    """Hydra's basic sweeper's jobs, in its order (BasicSweeper.split_arguments)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(list(arguments))
    return [list(job) for batch in BasicSweeper.split_arguments(parsed, None) for job in batch]


def edge_points(distributions: dict[str, Any]) -> list[dict[str, Any]]:
    """Points that bound a search: every key at its first value, then each key in turn at each
    of its other choices or its range's other end (every value drawn lies between the ends)."""
    values = {key: edges(dist) for key, dist in distributions.items()}
    first = {key: found[0] for key, found in values.items()}
    return [first, *({**first, key: v} for key, found in values.items() for v in found[1:])]


def edges(distribution: Any) -> list[Any]:
    """A distribution's choices, or the two ends of its range: both are values Optuna may
    draw (its `high` is included; a stepped range's is the last step it reaches)."""
    import optuna.distributions as d

    if isinstance(distribution, d.CategoricalDistribution):
        return list(distribution.choices)
    low, high = distribution.low, distribution.high
    return [low] if high == low else [low, high]


def seeded(jobs: list[list[str]], seeds: Sequence[int]) -> list[list[str]]:
    """The jobs as a sweep of seeds runs them (`seed=<s>` last): the first with every seed,
    the others with the first (a seed's range does not depend on the point)."""
    if not seeds or not jobs:
        return jobs
    return [
        *([*jobs[0], f"seed={s}"] for s in seeds),
        *([*job, f"seed={seeds[0]}"] for job in jobs[1:]),
    ]


def _sweeps(override: str) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([override])[0].is_sweep_override()


def varied(points: Sequence[Sequence[str]]) -> set[str]:
    """The overrides that are not in every point: what tells the points apart."""
    every = set.intersection(*map(set, points)) if points else set()
    return {o for p in points for o in p} - every


class Points:
    """The points of one sweep, composed and checked as their jobs will be."""

    def __init__(self, config: DictConfig, points: Sequence[Sequence[str]], kind: str) -> None:
        self.config = config
        self.points, self.kind = [list(p) for p in points], kind
        self.varied = varied(self.points)
        self.launch_dir = Path(config.hydra.runtime.cwd or Path.cwd()).resolve()
        self.sweep_dir = Path(str(config.hydra.sweep.dir)).resolve()
        self.rows: dict[str, int] = {}  # a data set's training rows, by its settings

    def check(self) -> None:
        """Every point composed (cheap: refuses a key or group option no job would have
        before MindSpore is loaded), then each distinct one checked as its job."""
        composed = [(number, p, self.composed(number, p)) for number, p in self._distinct()]
        for number, point, cfg in composed:
            self.check_job(number, point, cfg)

    def _distinct(self) -> Iterable[tuple[int, list[str]]]:
        seen: set[tuple[str, ...]] = set()
        for number, point in enumerate(self.points):
            if tuple(point) not in seen:
                seen.add(tuple(point))
                yield number, point

    def refused(self, number: int, point: Sequence[str], problem: str) -> ConfigError:
        """One line: the first problem of the point, the point, and that nothing ran."""
        first = problem.splitlines()[0] if problem else "refused"
        said = " ".join(o for o in point if o in self.varied or not self.varied) or "as given"
        return ConfigError(
            f"{first} [{self.kind} {number + 1} of {len(self.points)}: {said}]; no job was started"
        )

    def argv(self, point: Sequence[str]) -> list[str]:
        """The point as its job's command line (what entry.messages reads hints from)."""
        from sporeflow.entry.app import entry_script

        return [str(entry_script(self.config.hydra)), *point]

    def composed(self, number: int, point: list[str]) -> DictConfig:
        """The point's job config, composed as the launcher composes it (hydra node dropped)."""
        from sporeflow.entry import messages

        try:
            cfg = config_loader(self.config).load_sweep_config(self.config, point)
        except messages.usage_errors() as ex:
            raise self.refused(number, point, messages.describe(ex, self.argv(point))) from None
        with open_dict(cfg):
            del cfg["hydra"]
        return cfg

    def check_job(self, number: int, point: list[str], cfg: DictConfig) -> None:
        """What the job checks before work and needs no data but the split's size."""
        from sporeflow.config.paths import from_launch_dir
        from sporeflow.config.typed_text import as_typed
        from sporeflow.core.context import RunContext
        from sporeflow.core.errors import DataError
        from sporeflow.entry import messages

        self.load_mindspore()
        run_dir = self.sweep_dir / str(number)
        try:
            from sporeflow.job.plan import plan_job
            from sporeflow.job.preflight import check_batch

            job = from_launch_dir(as_typed(cfg, point), self.launch_dir)
            plan = plan_job(job, RunContext(run_dir, self.launch_dir, list(point)))
            check_batch(plan, self.train_rows(plan.cfg))
        except (ConfigError, DataError) as ex:
            raise self.refused(number, point, str(ex)) from None
        except messages.usage_errors() as ex:
            raise self.refused(number, point, messages.describe(ex, self.argv(point))) from None

    def train_rows(self, cfg: DictConfig) -> int:
        """The training split's size (counted once per data set: the batch does not change it)."""
        from sporeflow.config.components import build_dataset

        node = OmegaConf.to_container(cfg.dataset, resolve=True)
        assert isinstance(node, dict)
        node.pop("batch_size", None)
        key = json.dumps(node, sort_keys=True, default=str)
        if key not in self.rows:
            self.rows[key] = build_dataset(cfg).num_rows("train")
        return self.rows[key]

    def load_mindspore(self) -> None:
        """MindSpore loaded (validation imports the components' modules) as a job loads it: its
        log settings first, the log in the sweep dir (entry.app.mindspore_loaded)."""
        import sys

        if "mindspore" in sys.modules:
            return
        from sporeflow.entry.app import mindspore_loaded

        mindspore_loaded(self.config, self.sweep_dir)


def config_loader(config: DictConfig) -> Any:
    """The running Hydra's config loader (the one its launcher composes jobs with); without a
    running Hydra (a test calling the callback), one on the config's own search path."""
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        return GlobalHydra.instance().config_loader()
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_config_search_path

    main = next(
        s for s in config.hydra.runtime.config_sources if s.provider == "main"
    )  # the app's conf/
    path = main.path if main.schema == "file" else f"{main.schema}://{main.path}"
    return ConfigLoaderImpl(config_search_path=create_config_search_path(path))


def left_behind(config: DictConfig) -> None:
    """A refused sweep leaves no folder: the one MindSpore's log made for the check removed
    (with the date folders Hydra's sweep dir would have had alone)."""
    from sporeflow.entry.app import remove_unused_run_dir

    remove_unused_run_dir(Path(str(config.hydra.sweep.dir)).resolve())
