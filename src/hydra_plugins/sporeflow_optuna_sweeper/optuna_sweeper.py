"""A Hydra Sweeper on Optuna's ask/tell API (5.x): `hydra/sweeper=sporeflow_optuna`.

Why our own: the published hydra-optuna-sweeper 1.3.0 pins optuna<3, whose sqlite storage
breaks under SQLAlchemy 2 (which MLflow brings); Hydra's newer plugin needs hydra-core 1.4.

- The search space: `hydra.sweeper.params` plus the command line's sweeps, minus the keys the
  command line fixes (sporeflow.config.search_space has the rules and the syntax).
- The objective is the job's return value, maximised or minimised by `direction`; null takes it
  from a sporeflow app's `sweep.objective` (a loss is minimised, anything else maximised) and is
  `minimize` for any other app. A job that fails or returns no finite number makes its trial
  FAIL (reason, type and traceback kept); the search goes on and the sweep exits non-zero.
- `sampler`: tpe (seeded, `n_startup_trials` random ones first), random, or grid (every point
  of a finite space once, in BasicSweeper's order; a grid of no keys is one job).
- `storage` (default sqlite:///optuna.db in the launch dir) with `study_name`: the same command
  continues the study, and any number of processes on any machines reaching the storage share
  it (study.py: heartbeats, a dead process's trials run again, `n_trials` counts the study).
- Trials go to the launcher in batches of `n_jobs` (joblib/submitit run a batch concurrently).
- `<sweep dir>/optuna_trials.csv` maps trials to job numbers (the sweep's parent run reads it);
  `<sweep dir>/optimization_results.yaml` holds the best parameters and value.
"""

# (no `from __future__ import annotations` here: Hydra imports plugin modules without putting
# them in sys.modules, and dataclasses cannot then resolve string annotations)
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sporeflow_optuna_sweeper import results
from hydra_plugins.sporeflow_optuna_sweeper import study as shared
from sporeflow.config import objective, search_space
from sporeflow.core.errors import ConfigError, SporeflowError
from sporeflow.core.uris import redacted

log = logging.getLogger(__name__)


@dataclass
class SporeflowOptunaSweeperConf:
    _target_: str = "hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    study_name: str = "sporeflow"
    storage: Optional[str] = (
        "sqlite:///optuna.db"  # relative paths: the launch dir; null = in memory
    )
    n_trials: int = 10  # trials of the whole study, over every process sharing it
    n_jobs: int = 1  # trials per launcher batch
    direction: Optional[str] = None  # maximize | minimize; null: from the app's sweep.objective
    sampler: str = "tpe"  # tpe | random | grid
    seed: int = 1  # the sampler's seed
    n_startup_trials: int = 4  # random trials before TPE models the results
    heartbeat_interval: int = 10  # seconds; a trial silent for 3 intervals is a dead process's
    max_failure_rate: float = 0.0  # the sweep exits non-zero when more of its trials failed
    # flat (boost.rho: ...) or nested (boost: {rho: ...}); null: the command line's sweeps only
    params: Optional[Dict[str, Any]] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="sporeflow_optuna",
    node=SporeflowOptunaSweeperConf,
    provider="sporeflow",
)


class SweepJobsFailed(SporeflowError):
    """Some trials failed; the study kept going and recorded them as FAIL."""


def storage_url(storage: Optional[str], launch_dir: Path) -> Optional[str]:
    if (
        storage
        and storage.startswith("sqlite:///")
        and not Path(storage[len("sqlite:///") :]).is_absolute()
    ):
        return f"sqlite:///{(launch_dir / storage[len('sqlite:///') :]).resolve()}"
    return storage


def app_direction(config: DictConfig) -> str:
    """A sporeflow app's direction from `sweep.objective` (and boost.name for `auto`)."""
    chosen = OmegaConf.select(config, "sweep.objective", default=None)
    if chosen is None:
        return "minimize"  # not a sporeflow app: Optuna's own default
    boost = OmegaConf.select(config, "boost.name", default=None)
    dim_reduce = str(getattr(boost, "value", boost)) == "dim_reduce"
    return "maximize" if objective.maximize(objective.name(str(chosen), dim_reduce)) else "minimize"


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        study_name: str,
        storage: Optional[str],
        n_trials: int,
        n_jobs: int,
        direction: Optional[str],
        sampler: str,
        seed: int,
        n_startup_trials: int,
        heartbeat_interval: int,
        max_failure_rate: float,
        params: Optional[Dict[str, Any]],
    ) -> None:
        self.study_name, self.storage = study_name, storage
        self.n_trials, self.n_jobs = n_trials, n_jobs
        self.direction, self.sampler, self.seed = direction, sampler, seed
        self.n_startup_trials, self.heartbeat_interval = n_startup_trials, heartbeat_interval
        self.max_failure_rate = max_failure_rate
        self.params = OmegaConf.to_container(params) if isinstance(params, DictConfig) else params
        self.params = self.params or {}
        self.config: Optional[DictConfig] = None
        self.launcher = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def settings(self) -> dict:
        return {
            "direction": self.direction,
            "sampler": self.sampler,
            "n_trials": self.n_trials,
            "n_jobs": self.n_jobs,
            "heartbeat_interval": self.heartbeat_interval,
            "max_failure_rate": self.max_failure_rate,
            "storage": self.storage,
            "params": self.params,
        }

    def _sampler(self):
        import optuna

        if self.sampler == "tpe":
            return optuna.samplers.TPESampler(
                seed=self.seed, n_startup_trials=self.n_startup_trials
            )
        return optuna.samplers.RandomSampler(seed=self.seed)  # grid: every trial is enqueued

    def _open_study(self, launch_dir: Path, distributions: dict):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        url = storage_url(self.storage, launch_dir)
        direction = self.direction or app_direction(self.config)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=shared.storage(url, self.heartbeat_interval),
            sampler=self._sampler(),
            load_if_exists=True,
            direction=direction,
        )
        where = redacted(url) if url else "memory"
        if study.direction.name.lower() != direction:
            raise ConfigError(
                f"hydra.sweeper.study_name={self.study_name!r}: the study in {where} is "
                f"{study.direction.name.lower()}d, this sweep would {direction} it; "
                "pick a new study_name"
            )
        shared.check_space(study, distributions, where)
        return study

    def _enqueue_grid(self, study, distributions: dict) -> int:
        """sampler=grid: queue the points the study has not run; the grid's size caps n_trials."""
        points = search_space.grid(distributions)
        trials = shared.counted(study.get_trials(deepcopy=False))
        seen = [t.params or t.system_attrs.get("fixed_params") for t in trials]
        for point in points:
            if point not in seen:
                study.enqueue_trial(point, skip_if_exists=False)
        return min(self.n_trials, len(points))

    def sweep(self, arguments: List[str]) -> Any:
        space = search_space.checked(self.settings(), arguments)
        distributions = space.distributions()
        launch_dir = Path(self.config.hydra.runtime.cwd or Path.cwd())
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        study = self._open_study(launch_dir, distributions)
        # a dead process's trials: run them again
        shared.fail_stale(study, shared.grace_period(self.heartbeat_interval))
        n_trials = (
            self._enqueue_grid(study, distributions) if self.sampler == "grid" else self.n_trials
        )
        ended, running = shared.budget_used(study)
        print(
            f"[sporeflow] Optuna study {self.study_name!r} ({study.direction.name.lower()}): "
            f"{ended} trials done, {max(0, n_trials - ended - running)} to run"
            + (f", {running} running elsewhere" if running else ""),
            file=sys.stderr,
        )
        with shared.Heartbeat(study, self.heartbeat_interval) as heartbeat:
            batches, records, failed = self._run(study, space, distributions, n_trials, heartbeat)
        results.write_trials(sweep_dir, records)
        best = results.write_best(study, sweep_dir)
        if best is not None:
            print(
                f"[sporeflow] Optuna best trial {best.number}: value {best.value:.4f} with "
                + " ".join(
                    f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                    for k, v in best.params.items()
                ),
                file=sys.stderr,
            )
        if failed:
            summary = f"{len(failed)} of {len(records)} trials failed: " + "; ".join(failed)
            if len(failed) > self.max_failure_rate * len(records):
                raise SweepJobsFailed(summary)
            print(
                f"[sporeflow] {summary} (within max_failure_rate={self.max_failure_rate})",
                file=sys.stderr,
            )
        return batches

    def _ask(self, study, distributions: dict, n_trials: int, want: int, heartbeat) -> list:
        """Up to `want` trials within the study's budget (others may be asking too)."""
        batch = []
        while len(batch) < want:
            shared.fail_stale(study, shared.grace_period(self.heartbeat_interval))
            ended, running = shared.budget_used(study)
            if ended + running >= n_trials:
                break
            with shared.quiet():
                trial = study.ask(distributions)
            if not shared.within_budget(study, trial, n_trials):
                break
            heartbeat.add(trial._trial_id)  # noqa: SLF001
            batch.append(trial)
        return batch

    def _run(self, study, space, distributions: dict, n_trials: int, heartbeat):
        from optuna.trial import TrialState

        batches, records, failed, job = [], [], [], 0
        sweep_dir = Path(self.config.hydra.sweep.dir)
        while True:
            batch = self._ask(study, distributions, n_trials, self.n_jobs, heartbeat)
            if not batch:
                if not self._wait_for_others(study, n_trials):
                    break
                continue
            overrides = [space.job_overrides(trial.params) for trial in batch]
            try:
                returns = self.launcher.launch(overrides, initial_job_idx=job)
            except BaseException:
                for trial in batch:  # interrupted (Ctrl-C, SIGTERM): this process's trials
                    study.tell(trial, state=TrialState.FAIL)  # will not end; queue them again
                    shared.requeue(study, trial)
                raise
            batches.append(returns)
            for trial, ret in zip(batch, returns):
                result = results.outcome(ret)
                if not shared.tell(study, trial, result.value, result.error):
                    result = results.Outcome(None, shared.TAKEN_BACK)  # not lost: run again
                    print(
                        f"[sporeflow] trial {trial.number} (job {job}): {result.error}",
                        file=sys.stderr,
                    )
                elif result.value is None:
                    failed.append(f"trial {trial.number} (job {job}): {result.error}")
                    log.warning(
                        "trial %s (job %s) failed: %s\n%s",
                        trial.number,
                        job,
                        result.error,
                        result.traceback,
                    )
                heartbeat.discard(trial._trial_id)  # noqa: SLF001
                records.append(
                    {
                        "trial": trial.number,
                        "job": job,
                        "state": result.state,
                        "value": "" if result.value is None else result.value,
                        "error": result.error,
                        **trial.params,
                    }
                )
                job += 1
            results.write_trials(sweep_dir, records)
        return batches, records, failed

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
