"""A Hydra Sweeper on Optuna's ask/tell API (5.x): `hydra/sweeper=sporeflow_optuna`.

Why our own: the published hydra-optuna-sweeper 1.3.0 pins optuna<3, whose sqlite storage
breaks under SQLAlchemy 2 (which MLflow brings); Hydra's newer plugin needs hydra-core 1.4.

- The search space: `hydra.sweeper.params` plus the command line's sweeps, minus the keys the
  command line fixes (sporeflow.config.search_space has the rules and the syntax).
- The objective is the job's return value, maximised or minimised by `direction`; null takes it
  from a sporeflow app's `sweep.objective` (a loss is minimised, anything else maximised) and is
  `minimize` for any other app. A job that fails or returns no finite number makes its trial
  FAIL (reason, type and traceback kept); the search goes on and the sweep exits non-zero.
- `direction` a list (`[maximize, minimize]`): a multi-objective study (the official plugin's
  way); each job returns one number per direction. A sporeflow app's `sweep.objective` is then
  the list `[<accuracy>, <cost>]`, the directions checked against it before any job
  (objective.direction_refusal). Optuna cannot prune a multi-objective trial: the pruner is off
  (said in one line). The study's Pareto set (Optuna's `best_trials`) ends the sweep and is in
  optimization_results.yaml as `solutions`, as officially. With one direction a sporeflow job of a
  list objective is ranked by its first value (its accuracy).
- `sampler`: tpe (seeded, `n_startup_trials` random ones first), random, or grid (every point
  of a finite space once, in BasicSweeper's order; a grid of no keys is one job); or, as in the
  official plugin, a node naming any class of `optuna.samplers` by `_target_` with its
  arguments (`hydra/sweeper/sampler=cmaes`, ...), checked to be one before it is built
  (sporeflow.config.optuna_sampler). Hydra never instantiates this sweeper's nodes itself
  (`_recursive_: false`): a `_target_` in them is data until checked.
- `custom_search_space`: `module.function` of the sweep's own code, called with (config, trial)
  on each trial to suggest more parameters (conditional ones); its module is checked to be a
  file of the project before it is imported.
- `storage` (default sqlite:///optuna.db in the launch dir) with `study_name`: the same command
  continues the study, and any number of processes on any machines reaching the storage share
  it (study.py: heartbeats, a dead process's trials run again, `n_trials` counts the study).
- `n_jobs` trials run at a time. With a launcher that runs jobs elsewhere (joblib, submitit)
  each is launched as soon as a slot frees (a thread per slot): no batch waits for its slowest
  job. Hydra's basic launcher runs jobs in this process, one at a time, in batches of n_jobs;
  `batched=true` keeps batches with any launcher (the official plugin's way).
- `pruner` (median | hyperband; none by default): each job reports its evaluation every epoch
  to its trial (sporeflow.stage.pruning) and stops when the pruner finds it behind the others;
  its trial ends PRUNED (not a failure), its MLflow runs KILLED with `sporeflow.pruned`.
- `seeds` (e.g. [1,2,3]): each trial is one job per seed and tells the study one value over them,
  `seed_statistic` mean or lcb (seeds.py), so the search does not climb one seed's noise.
- `<sweep dir>/optuna_trials.csv` maps trials to job numbers (the sweep's parent run reads it);
  `<sweep dir>/optimization_results.yaml` holds the best parameters and value.
"""

# (no `from __future__ import annotations` here: Hydra imports plugin modules without putting
# them in sys.modules, and dataclasses cannot then resolve string annotations)
import logging
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, ListConfig, OmegaConf

from hydra_plugins.sporeflow_optuna_sweeper import results, seeds
from hydra_plugins.sporeflow_optuna_sweeper import study as shared
from hydra_plugins.sporeflow_optuna_sweeper.launching import LaunchingSweeper, register
from sporeflow.config import objective, optuna_sampler, search_space
from sporeflow.config.facts import sweep_directions
from sporeflow.core.context import TRIAL_ID_ENV
from sporeflow.core.errors import ConfigError, SporeflowError
from sporeflow.core.processes import signal_children
from sporeflow.core.signals import Interrupted
from sporeflow.core.uris import redacted

log = logging.getLogger(__name__)


@dataclass
class SporeflowOptunaSweeperConf:
    """`hydra/sweeper=sporeflow_optuna`: an Optuna study on ask/tell, shared by every process
    that names the same study and storage."""

    _target_: str = "hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    defaults: List[Any] = field(default_factory=lambda: ["_self_", {"sampler": None}])
    """`hydra/sweeper/sampler=<name>` (or `override hydra/sweeper/sampler: <name>`) picks one of
    the official plugin's sampler nodes (tpe, random, grid, cmaes, nsgaii, gp, qmc) over the
    short form below."""
    _recursive_: bool = False
    """Hydra passes `sampler` to the sweeper as data (it would otherwise build its `_target_`
    before any check)."""
    study_name: str = "sporeflow"
    """The study's name in its storage; start the same command again to continue it."""
    storage: Optional[str] = "sqlite:///optuna.db"
    """Where the study lives: a relative sqlite path is in the launch dir, `postgresql://...`
    shares it between machines; null = in memory."""
    n_trials: int = 10
    """Trials of the whole study, over every process sharing it."""
    n_jobs: int = 1
    """Trials running at a time (with a joblib or submitit launcher)."""
    batched: bool = False
    """true: wait for all `n_jobs` trials before asking for more (the official plugin's way);
    false: a free slot starts the next trial at once."""
    direction: Any = None
    """`maximize` or `minimize`; null: from the app's `sweep.objective` (a loss is minimised); a
    list (`[maximize, minimize]`): a multi-objective study, one direction per value the job
    returns (a sporeflow app's `sweep.objective=[<accuracy>, <cost>]`)."""
    sampler: Any = "tpe"
    """`tpe`, `random`, `grid` (every point of a choice/range space once, in order), or a node
    `{_target_: optuna.samplers.<Name>, <argument>: ...}` naming any Optuna sampler with its
    arguments (`hydra/sweeper/sampler=cmaes` and the official plugin's other names); a node
    without `_target_` is TPESampler's arguments."""
    seed: int = 1
    """The sampler's seed unless its node gives one (a continued study's sampler: this plus the
    trials it holds, so it does not draw the first sweep's points again)."""
    n_startup_trials: int = 4
    """Random trials before TPE models the results; also the trials that complete before any
    is pruned."""
    heartbeat_interval: int = 10
    """Seconds; a trial silent for three intervals belonged to a dead process and is failed."""
    max_failure_rate: float = 0.0
    """The sweep exits non-zero when a larger share of its trials failed."""
    pruner: str = "none"
    """`none`, `median` or `hyperband`: stop a job whose evaluation each epoch is behind the
    others'."""
    pruner_min_epochs: int = 1
    """A trial trains at least this many epochs before it can be pruned."""
    seeds: Optional[List[int]] = None
    """Seeds each trial runs (one job per seed, `seed=<s>`), telling the study one value over
    them (`seed_statistic`); null: one job per trial with the config's seed."""
    seed_statistic: str = "mean"
    """A trial's value over its seeds: `mean`, or `lcb` (the pessimistic end of the mean's 95% t
    interval: lower for a maximised objective, upper for a minimised one; needs 2 seeds)."""
    params: Optional[Dict[str, Any]] = field(default_factory=dict)
    """The search space: flat (`boost.rho: interval(0.3, 0.8)`) or nested; null: the command
    line's sweeps only."""
    custom_search_space: Optional[str] = None
    """`module.function` in the sweep's own code (under the launch folder or beside the app's
    config folder), called as `function(cfg, trial)` on every trial to suggest more (e.g.
    conditional) parameters; `+w` as a name adds a key the config lacks."""


register("sporeflow_optuna", SporeflowOptunaSweeperConf)
for _name, _node in optuna_sampler.GROUP.items():  # hydra/sweeper/sampler=cmaes, as officially
    ConfigStore.instance().store(
        group="hydra/sweeper/sampler", name=_name, node=_node, provider="sporeflow"
    )


class SweepJobsFailed(SporeflowError):
    """Some trials failed; the study kept going and recorded them as FAIL."""


class OptunaSweeper(LaunchingSweeper):
    option = "hydra/sweeper=sporeflow_optuna"

    def __init__(
        self,
        study_name: str,
        storage: Optional[str],
        n_trials: int,
        n_jobs: int,
        batched: bool,
        direction: Any,
        sampler: str,
        seed: int,
        n_startup_trials: int,
        heartbeat_interval: int,
        max_failure_rate: float,
        pruner: str,
        pruner_min_epochs: int,
        params: Optional[Dict[str, Any]],
        seeds: Optional[List[int]] = None,
        seed_statistic: str = "mean",
        custom_search_space: Optional[str] = None,
    ) -> None:
        self.study_name, self.storage = study_name, storage
        self.n_trials, self.n_jobs, self.batched = n_trials, n_jobs, batched
        if isinstance(sampler, DictConfig):  # data until checked (search_space.checked)
            sampler = OmegaConf.to_container(sampler, resolve=True)
        if isinstance(direction, ListConfig):
            direction = OmegaConf.to_container(direction, resolve=True)
        self.directions: List[str] = []  # the study's, decided at the sweep's start
        self.direction, self.sampler, self.seed = direction, sampler, seed
        self.custom_search_space = custom_search_space
        self.space: Optional[search_space.SearchSpace] = None  # checked at the sweep's start
        self.n_startup_trials, self.heartbeat_interval = n_startup_trials, heartbeat_interval
        self.max_failure_rate = max_failure_rate
        self.pruner, self.pruner_min_epochs = pruner, pruner_min_epochs
        self.seeds = list(seeds) if seeds is not None else None
        self.seed_statistic = seed_statistic
        self.params = OmegaConf.to_container(params) if isinstance(params, DictConfig) else params
        self.params = self.params or {}

    def settings(self) -> dict:
        return {
            "direction": self.direction,
            "sampler": self.sampler,
            "n_trials": self.n_trials,
            "n_jobs": self.n_jobs,
            "heartbeat_interval": self.heartbeat_interval,
            "max_failure_rate": self.max_failure_rate,
            "pruner": self.pruner,
            "pruner_min_epochs": self.pruner_min_epochs,
            "storage": self.storage,
            "params": self.params,
            "seeds": self.seeds,
            "seed_statistic": self.seed_statistic,
            "custom_search_space": self.custom_search_space,
        }

    def _sampler(self, offset: int = 0):
        """The checked sampler, built (grid: every trial is enqueued, drawn at random)."""
        assert self.space is not None and self.space.sampler is not None
        return self.space.sampler.build(self.seed, self.n_startup_trials, offset)

    def _open_study(self, launch_dir: Path, distributions: dict):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        url = search_space.storage_url(self.storage, launch_dir)
        directions = self.directions
        direction = directions[0] if len(directions) == 1 else None
        study = optuna.create_study(
            study_name=self.study_name,
            storage=shared.storage(url, self.heartbeat_interval),
            sampler=self._sampler(),
            load_if_exists=True,
            direction=direction,
            directions=directions if direction is None else None,
        )
        held = len(study.get_trials(deepcopy=False))
        if held:  # a continued study: new draws, not the first sweep's random start-up again
            study.sampler = self._sampler(held)
        where = redacted(url) if url else "memory"
        held_directions = [d.name.lower() for d in study.directions]
        if direction is None and held_directions != directions:
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r}: the study in {where} has "
                f"directions [{', '.join(held_directions)}], this sweep "
                f"[{', '.join(directions)}]; pick a new study_name"
            )
        if direction is not None and len(held_directions) > 1:
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r}: the study in {where} has "
                f"directions [{', '.join(held_directions)}], this sweep one ({direction}); "
                "pick a new study_name"
            )
        if direction is not None and study.direction.name.lower() != direction:
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r}: the study in {where} is "
                f"{study.direction.name.lower()}d, this sweep would {direction} it; "
                "pick a new study_name"
            )
        shared.check_space(study, distributions, where, more=self._extender is not None)
        return study

    def _enqueue_grid(self, study, distributions: dict) -> int:
        """sampler=grid: queue the points the study has not run; the grid's size caps n_trials."""
        points = search_space.grid(distributions)
        trials = shared.counted(study.get_trials(deepcopy=False))
        seen = [
            {
                k: v
                for k, v in (t.params or t.system_attrs.get("fixed_params") or {}).items()
                if k in distributions
            }
            for t in trials
        ]
        for point in points:
            if point not in seen:
                study.enqueue_trial(point, skip_if_exists=False)
        return min(self.n_trials, len(points))

    def sweep(self, arguments: List[str]) -> Any:
        self.refuse_choice_on_test()
        launch_dir = Path(self.config.hydra.runtime.cwd or Path.cwd())
        roots = optuna_sampler.project_roots(
            launch_dir, OmegaConf.to_container(self.config.hydra.runtime.config_sources)
        )
        space = self.space = search_space.checked(self.settings(), arguments, roots)
        self.directions = sweep_directions(self.config, self.direction)
        multi = len(self.directions) > 1
        if multi and self.pruner != "none":
            print(
                f"[sporeflow] hydra.sweeper.pruner={self.pruner} is off: Optuna cannot prune the "
                f"trials of a multi-objective study (direction=[{','.join(self.directions)}])",
                file=sys.stderr,
            )
            self.pruner = "none"
        self._extender = space.custom.load() if space.custom is not None else None
        distributions = space.distributions()
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        study = self._open_study(launch_dir, distributions)
        # a dead process's trials: run them again
        shared.fail_stale(study, shared.grace_period(self.heartbeat_interval))
        n_trials = self._enqueue_grid(study, distributions) if space.sampler.grid else self.n_trials
        ended, running = shared.budget_used(study)
        print(
            f"[sporeflow] Optuna study {self.study_name!r} ({_directions(study)}, "
            f"{type(study.sampler).__name__ if not space.sampler.grid else 'grid'}): "
            f"{ended} trials done, {max(0, n_trials - ended - running)} to run"
            + (f", {running} running elsewhere" if running else ""),
            file=sys.stderr,
        )
        with shared.Heartbeat(study, self.heartbeat_interval) as heartbeat:
            batches, records, failed = self._run(study, space, distributions, n_trials, heartbeat)
        results.write_trials(sweep_dir, records)
        best = results.write_best(study, sweep_dir)
        if multi:
            for line in results.pareto_lines(best or []):
                print(f"[sporeflow] {line}", file=sys.stderr)
        elif best is not None:
            print(
                f"[sporeflow] Optuna best trial {best.number}: value {best.value:.4f} with "
                + results.shown_params(best.params),
                file=sys.stderr,
            )
        if failed:
            summary = f"{len(failed)} of {len(records)} trials failed: " + "; ".join(failed)
            if len(failed) > self.max_failure_rate * len(records):
                raise SweepJobsFailed(
                    f"{summary} (more than hydra.sweeper.max_failure_rate={self.max_failure_rate} allows)"
                )
            print(
                f"[sporeflow] {summary} (within max_failure_rate={self.max_failure_rate})",
                file=sys.stderr,
            )
        return batches

    _extender: Any = None  # the custom_search_space function, loaded at the sweep's start

    def _extend(self, study, trial) -> None:
        """custom_search_space: the user's function suggests more parameters on the trial; if
        it raises, the trial is told FAIL with the reason and the error ends the sweep."""
        if self._extender is None:
            return
        try:
            self._extender(self.config, trial)
        except Exception as ex:
            shared.tell(study, trial, None, f"custom_search_space: {type(ex).__name__}: {ex}")
            raise

    def _ask(self, study, distributions: dict, n_trials: int, want: int, heartbeat) -> list:
        """Up to `want` trials within the study's budget (others may be asking too)."""
        batch = []
        while len(batch) < want:
            shared.fail_stale(study, shared.grace_period(self.heartbeat_interval))
            ended, running = shared.budget_used(study)
            if ended + running >= n_trials:
                break
            trial = shared.ask(study, distributions)
            if trial is None:
                continue
            self._extend(study, trial)
            if not shared.within_budget(study, trial, n_trials):
                break
            heartbeat.add(trial._trial_id)  # noqa: SLF001
            batch.append(trial)
        return batch

    def _run(self, study, space, distributions: dict, n_trials: int, heartbeat):
        sweep_dir = Path(self.config.hydra.sweep.dir)
        listed = (
            len(
                objective.parts(
                    OmegaConf.select(self.config, "sweep.objective", default=None) or []
                )
            )
            > 1
        )
        trials = _Trials(study, heartbeat, sweep_dir, self.seeds, self.seed_statistic, listed)
        if self._unbatched():
            self._run_in_slots(trials, space, distributions, n_trials)
        else:
            self._run_in_batches(trials, space, distributions, n_trials)
        return trials.batches, sorted(trials.records, key=lambda r: r["job"]), trials.failed

    def _unbatched(self) -> bool:
        """Slots, not batches, when the launcher runs jobs elsewhere (joblib, submitit) and more
        than one at a time; Hydra's basic launcher runs jobs one by one in this process."""
        from hydra._internal.core_plugins.basic_launcher import BasicLauncher

        return not self.batched and self.n_jobs > 1 and not isinstance(self.launcher, BasicLauncher)

    def _run_in_batches(self, trials: "_Trials", space, distributions: dict, n_trials: int):
        """Ask n_jobs trials, launch them together, tell them all, ask again."""
        while True:
            batch = self._ask(trials.study, distributions, n_trials, self.n_jobs, trials.heartbeat)
            if not batch:
                if not self._wait_for_others(trials.study, n_trials):
                    return
                continue
            try:
                for run in consecutive(batch):  # job numbers follow trial numbers
                    returns = self.launcher.launch(
                        [job for t in run for job in self._jobs(space, t)],
                        initial_job_idx=seeds.first_job(run[0].number, self.seeds),
                    )
                    trials.batches.append(returns)
                    k = seeds.jobs_per_trial(self.seeds)
                    for i, trial in enumerate(run):
                        if len(returns) >= (i + 1) * k:
                            trials.told(trial, returns[i * k : (i + 1) * k])
                    batch = batch[len(run) :]
            except BaseException:
                trials.give_back(batch)  # interrupted: this process's trials will not end
                raise

    def _run_in_slots(self, trials: "_Trials", space, distributions: dict, n_trials: int):
        """n_jobs slots, each a thread that asks one trial, launches it as a job of its own and
        asks again as soon as it ends: no job waits for a slower one of its batch."""
        import threading

        lock, problems, running = threading.Lock(), [], {}
        stopping = threading.Event()

        def slot() -> None:
            while not problems and not stopping.is_set():
                with lock:
                    asked = self._ask(trials.study, distributions, n_trials, 1, trials.heartbeat)
                    if asked:
                        number = asked[0].number
                        running[number] = asked[0]
                if not asked:
                    if running or not self._wait_for_others(trials.study, n_trials):
                        return  # this process's last trials end in the other slots
                    continue
                try:
                    returns = self.launcher.launch(
                        self._jobs(space, asked[0]),
                        initial_job_idx=seeds.first_job(number, self.seeds),
                    )
                except BaseException as ex:  # noqa: BLE001 - the main thread raises it
                    problems.append(ex)
                    return
                with lock:
                    if stopping.is_set():
                        return  # interrupted: the main thread gives the trial back
                    del running[number]
                    trials.batches.append(returns)
                    trials.told(asked[0], returns)

        threads = [
            threading.Thread(target=slot, name=f"trial-slot-{i}", daemon=True)
            for i in range(self.n_jobs)
        ]
        for thread in threads:
            thread.start()
        try:
            while any(t.is_alive() for t in threads):
                for thread in threads:
                    thread.join(timeout=0.5)
        except KeyboardInterrupt as ex:  # Ctrl-C / SIGTERM reach this thread only
            self._stop_slots(threads, stopping)
            with lock:
                trials.give_back(list(running.values()))
            raise ex if isinstance(ex, Interrupted) else Interrupted(signal.SIGINT) from None
        if problems:
            raise problems[0]

    @staticmethod
    def _stop_slots(threads: list, stopping: Any, grace: float = 30.0) -> None:
        """Interrupt the running jobs (their runs end KILLED), wait for their slots to return;
        SIGKILL the worker processes of jobs that did not end within `grace` seconds."""
        import time

        stopping.set()
        signalled = signal_children(signal.SIGINT)
        deadline = time.monotonic() + grace
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        for child in signalled:
            if any(t.is_alive() for t in threads) and child.is_running():
                child.kill()

    def _jobs(self, space, trial) -> List[List[str]]:
        """The trial's jobs' overrides: its parameters (once per seed with `seeds`); with a
        pruner also its id, for the job to report to (an environment variable: the job's own
        overrides, name and config stay as they were)."""
        overrides = space.job_overrides(trial.params)
        if self.pruner != "none":
            overrides.append(f"++hydra.job.env_set.{TRIAL_ID_ENV}={trial._trial_id}")  # noqa: SLF001
        return seeds.with_seeds(overrides, self.seeds)

    def _wait_for_others(self, study, n_trials: int) -> bool:
        """Nothing left to ask: while other processes' trials still run, wait (one of them may
        die and its trial come back to be run here). True when a trial can be asked again."""
        import time

        while True:
            shared.fail_stale(study, shared.grace_period(self.heartbeat_interval))
            ended, running = shared.budget_used(study)
            if ended + running < n_trials:
                return True
            if running == 0:
                return False
            time.sleep(self.heartbeat_interval)


def _directions(study) -> str:
    """`maximize`, or a multi-objective study's `[maximize, minimize]`."""
    found = [d.name.lower() for d in study.directions]
    return found[0] if len(found) == 1 else f"[{', '.join(found)}]"


def consecutive(trials: list) -> List[list]:
    """A batch cut where its trial numbers jump (another process asked in between): Hydra
    numbers a launch's jobs consecutively, and a job's number is its trial's."""
    runs: List[list] = []
    for trial in trials:
        if runs and trial.number == runs[-1][-1].number + 1:
            runs[-1].append(trial)
        else:
            runs.append([trial])
    return runs


class _Trials:
    """The trials this process ran: told to the study, recorded in optuna_trials.csv."""

    def __init__(
        self,
        study,
        heartbeat,
        sweep_dir: Path,
        seeds_: Optional[List[int]],
        statistic: str,
        first_of_list: bool = False,
    ):
        self.study, self.heartbeat, self.sweep_dir = study, heartbeat, sweep_dir
        self.seeds, self.statistic = seeds_, statistic  # the sweeper's `seeds`, `seed_statistic`
        self.maximize = [d.name == "MAXIMIZE" for d in study.directions]
        # a sporeflow job of `sweep.objective=[<accuracy>, <cost>]` returns both; a study of one
        # direction is told the first (the accuracy)
        self.first_of_list = len(self.maximize) == 1 and first_of_list
        self.batches: List[Any] = []  # Hydra's JobReturns, as the launcher gave them back
        self.records: List[dict] = []
        self.failed: List[str] = []

    def give_back(self, trials: list) -> None:
        """Trials this process will not finish (interrupted): FAIL, their parameters queued."""
        from optuna.trial import TrialState

        for trial in trials:
            self.study.tell(trial, state=TrialState.FAIL)
            shared.requeue(self.study, trial)

    def told(self, trial, returns: list) -> None:
        """Tell the study what the trial's jobs returned (one value over their seeds), and
        record each job."""
        job = seeds.first_job(trial.number, self.seeds)
        each = [results.outcome(ret, len(self.maximize), self.first_of_list) for ret in returns]
        result = seeds.combined(each, self.seeds, self.statistic, self.maximize)
        if not shared.tell(self.study, trial, result.value, result.error, bool(result.pruned)):
            result = results.Outcome(None, shared.TAKEN_BACK)  # not lost: run again
            print(f"[sporeflow] trial {trial.number} (job {job}): {result.error}", file=sys.stderr)
        elif result.pruned:
            print(f"[sporeflow] job {job}: {result.pruned}", file=sys.stderr)
        elif result.value is None:
            self.failed.append(f"trial {trial.number} (job {job}): {result.error}")
            log.warning(
                "trial %s (job %s) failed: %s\n%s",
                trial.number,
                job,
                result.error,
                result.traceback,
            )
        self.heartbeat.discard(trial._trial_id)  # noqa: SLF001
        for i, outcome in enumerate(each):
            self.records.append(self._record(trial, job + i, result, outcome, i))
        results.write_trials(self.sweep_dir, sorted(self.records, key=lambda r: r["job"]))

    def _record(self, trial, job: int, result, outcome, index: int) -> dict:
        """A job's row of optuna_trials.csv: its trial's state and value (with seeds also the
        job's seed and its own value)."""
        row = {"trial": trial.number, "job": job, "state": result.state}
        row["value"] = results.first(result.value)
        if len(self.maximize) > 1:  # a multi-objective study: every value, `value` the first
            row["values"] = results.shown_values(result.value)
        if self.seeds:
            row["seed"] = self.seeds[index]
            row["job_value"] = results.first(outcome.value)
            if len(self.maximize) > 1:
                row["job_values"] = results.shown_values(outcome.value)
        return {**row, "error": result.error, **trial.params}
