"""A Hydra Sweeper on Optuna's ask/tell API (5.x): `hydra/sweeper=sporeflow_optuna`.

Why our own: the published hydra-optuna-sweeper 1.3.0 pins optuna<3, whose sqlite storage
breaks under SQLAlchemy 2 (which MLflow brings); Hydra's newer plugin needs hydra-core 1.4.

- The search space is `hydra.sweeper.params`, in Hydra's sweep syntax: `interval(a, b)` (float),
  `int(interval(a, b))`, `tag(log, interval(a, b))`, `choice(x, y, ...)`, `range(a, b[, step])`.
- The objective is the job's return value: `sweep.objective` of the composed config (app.run_task
  returns it), maximised, or minimised when it is a loss. Failed jobs are told FAIL and the search
  goes on; the sweep then exits non-zero and its MLflow parent says which failed.
- `storage` (default sqlite:///optuna.db in the launch dir) with `study_name`: starting the same
  command again continues the study - trials an interruption left RUNNING are marked FAIL and
  their parameters queued again; `n_trials` counts every finished trial of the study.
- Trials go to the launcher in batches of `n_jobs` (joblib/submitit run a batch concurrently).
- `<sweep dir>/optuna_trials.csv` maps trials to job numbers (the sweep's parent run reads it);
  `<sweep dir>/optimization_results.yaml` holds the best parameters and value.
"""

# (no `from __future__ import annotations` here: Hydra imports plugin modules without putting
# them in sys.modules, and dataclasses cannot then resolve string annotations)
import csv
import logging
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep
from hydra.core.plugins import Plugins
from hydra.core.utils import JobStatus
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig, OmegaConf

from sporeflow.config import objective
from sporeflow.config.schema import BoostName
from sporeflow.core.errors import ConfigError, SporeflowError
from sporeflow.entry.sweep_run import TRIALS_FILE

log = logging.getLogger(__name__)


REQUEUED = (
    "sporeflow.requeued"  # user attr of an interrupted trial whose parameters were queued again
)


@dataclass
class SporeflowOptunaSweeperConf:
    _target_: str = "hydra_plugins.sporeflow_optuna_sweeper.optuna_sweeper.OptunaSweeper"
    study_name: str = "sporeflow"
    storage: Optional[str] = (
        "sqlite:///optuna.db"  # relative paths: the launch dir; null = in memory
    )
    n_trials: int = 10
    n_jobs: int = 1  # trials per launcher batch
    seed: int = 1  # TPE sampler seed
    n_startup_trials: int = 4  # random trials before TPE models the results
    params: Dict[str, str] = field(default_factory=dict)


ConfigStore.instance().store(
    group="hydra/sweeper",
    name="sporeflow_optuna",
    node=SporeflowOptunaSweeperConf,
    provider="sporeflow",
)


class SweepJobsFailed(SporeflowError):
    """Some trials failed; the study kept going and recorded them as FAIL."""


def distribution(key: str, spec: str):
    """Hydra sweep syntax -> an Optuna distribution (ConfigError naming the key otherwise)."""
    import optuna.distributions as d

    try:
        value = OverridesParser.create().parse_override(f"{key}={spec}").value()
    except Exception as ex:
        raise ConfigError(f"hydra.sweeper.params.{key}={spec!r}: {ex}") from ex
    if isinstance(value, ChoiceSweep):
        return d.CategoricalDistribution(list(value.list))
    if isinstance(value, RangeSweep):
        if all(isinstance(x, int) for x in (value.start, value.stop, value.step)):
            return d.IntDistribution(value.start, value.stop - 1, step=value.step)
        return d.FloatDistribution(value.start, value.stop, step=value.step)
    if isinstance(value, IntervalSweep):
        log_scale = "log" in value.tags
        if isinstance(value.start, int) and isinstance(value.end, int):
            return d.IntDistribution(value.start, value.end, log=log_scale)
        return d.FloatDistribution(float(value.start), float(value.end), log=log_scale)
    raise ConfigError(
        f"hydra.sweeper.params.{key}={spec!r}: not a search space; use interval(a, b), "
        "int(interval(a, b)), tag(log, interval(a, b)), choice(x, y, ...) or range(a, b)"
    )


def storage_url(storage: Optional[str], launch_dir: Path) -> Optional[str]:
    if (
        storage
        and storage.startswith("sqlite:///")
        and not Path(storage[len("sqlite:///") :]).is_absolute()
    ):
        return f"sqlite:///{(launch_dir / storage[len('sqlite:///') :]).resolve()}"
    return storage


class OptunaSweeper(Sweeper):
    def __init__(
        self,
        study_name: str,
        storage: Optional[str],
        n_trials: int,
        n_jobs: int,
        seed: int,
        n_startup_trials: int,
        params: Dict[str, str],
    ) -> None:
        self.study_name, self.storage, self.n_trials, self.n_jobs = (
            study_name,
            storage,
            n_trials,
            n_jobs,
        )
        self.seed, self.n_startup_trials, self.params = seed, n_startup_trials, dict(params or {})
        self.config: Optional[DictConfig] = None
        self.launcher = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )

    def _study(self, launch_dir: Path):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        boost = OmegaConf.select(self.config, "boost.name", default=None)  # an Enum, or its name
        dim_reduce = (
            boost is not None and BoostName(getattr(boost, "value", boost)) is BoostName.dim_reduce
        )
        name = objective.name(
            OmegaConf.select(self.config, "sweep.objective", default="auto"), dim_reduce
        )
        sampler = optuna.samplers.TPESampler(seed=self.seed, n_startup_trials=self.n_startup_trials)
        study = optuna.create_study(
            study_name=self.study_name,
            storage=storage_url(self.storage, launch_dir),
            sampler=sampler,
            load_if_exists=True,
            direction="maximize" if objective.maximize(name) else "minimize",
        )
        return study, name

    def sweep(self, arguments: List[str]) -> Any:
        from optuna.trial import TrialState

        if self.n_trials < 1 or self.n_jobs < 1:
            raise ConfigError(
                f"hydra.sweeper.n_trials={self.n_trials} and n_jobs={self.n_jobs} must be >= 1"
            )
        if not self.params:
            raise ConfigError(
                "hydra.sweeper.params is empty: name at least one key to search, "
                "e.g. hydra.sweeper.params.boost.rho='interval(0.3, 0.8)'"
            )
        fixed = OverridesParser.create().parse_overrides(arguments)
        for override in fixed:
            if override.is_sweep_override():
                raise ConfigError(
                    f"{override.input_line}: the Optuna sweeper searches hydra.sweeper.params; "
                    "a command-line sweep (a,b / choice / range) is not combined with it"
                )
        space = {key: distribution(key, str(spec)) for key, spec in self.params.items()}
        launch_dir = Path(self.config.hydra.runtime.cwd or Path.cwd())
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        study, name = self._study(launch_dir)

        for stale in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            # an interrupted search: FAIL the trial and try its parameters again; it does not
            # count against n_trials (now or in any later run), so the same command runs it again
            study._storage.set_trial_user_attr(stale._trial_id, REQUEUED, True)  # noqa: SLF001
            study.tell(stale.number, state=TrialState.FAIL)
            study.enqueue_trial(stale.params, skip_if_exists=False)
        ended = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)
        done = sum(
            1
            for t in study.get_trials(deepcopy=False, states=ended)
            if not t.user_attrs.get(REQUEUED)
        )
        remaining = max(0, self.n_trials - done)
        print(
            f"[sporeflow] Optuna study {self.study_name!r} ({study.direction.name.lower()} {name}): "
            f"{done} trials done, {remaining} to run",
            file=sys.stderr,
        )
        records, failed, job = [], [], 0
        while remaining > 0:
            batch = [study.ask(space) for _ in range(min(self.n_jobs, remaining))]
            overrides = [
                [*arguments, *(f"{k}={v}" for k, v in trial.params.items())] for trial in batch
            ]
            returns = self.launcher.launch(overrides, initial_job_idx=job)
            for trial, ret in zip(batch, returns):
                # JobReturn.return_value re-raises a failed job's exception; _return_value holds it
                value = ret._return_value if ret.status == JobStatus.COMPLETED else None  # noqa: SLF001
                if value is not None and math.isfinite(float(value)):
                    study.tell(trial, float(value))
                    state = "COMPLETE"
                else:
                    study.tell(trial, state=TrialState.FAIL)
                    state = "FAIL"
                    failed.append(
                        f"trial {trial.number} (job {job}): "
                        f"{ret._return_value if value is None else f'objective {value}'}"  # noqa: SLF001
                    )
                records.append(
                    {
                        "trial": trial.number,
                        "job": job,
                        "state": state,
                        "value": "" if value is None else value,
                        **trial.params,
                    }
                )
                job += 1
            remaining -= len(batch)
            self._write_trials(sweep_dir, records)
        self._write_best(study, sweep_dir)
        if failed:
            raise SweepJobsFailed(
                f"{len(failed)} of {len(records)} trials failed: " + "; ".join(failed)
            )
        return None

    @staticmethod
    def _write_trials(sweep_dir: Path, records: list[dict]) -> None:
        columns = list(dict.fromkeys(k for r in records for k in r))
        with open(sweep_dir / TRIALS_FILE, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=columns)
            writer.writeheader()
            writer.writerows(records)

    def _write_best(self, study, sweep_dir: Path) -> None:
        try:
            best = study.best_trial
        except ValueError:  # no trial completed
            return
        OmegaConf.save(
            OmegaConf.create(
                {
                    "name": "optuna",
                    "study": self.study_name,
                    "best_trial": best.number,
                    "best_params": best.params,
                    "best_value": best.value,
                }
            ),
            sweep_dir / "optimization_results.yaml",
        )
        print(
            f"[sporeflow] Optuna best trial {best.number}: value {best.value:.4f} with "
            + " ".join(
                f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                for k, v in best.params.items()
            ),
            file=sys.stderr,
        )
