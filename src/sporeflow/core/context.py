"""What a run knows about where it runs: directories, overrides, commit, the sweep it belongs
to. Plain data, no Hydra."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional


@dataclass
class RunContext:
    run_dir: Path  # Hydra's output dir for this job: checkpoints go here
    launch_dir: Path  # where the command was started: mlflow.db goes here
    overrides: list[str] = field(default_factory=list)
    hydra_dir: Optional[Path] = None  # <run_dir>/.hydra with config.yaml and overrides.yaml
    git_commit: Optional[str] = None  # of the sporeflow code that runs (not of the launch dir)
    git_dirty: Optional[bool] = None  # uncommitted changes to tracked files
    entry_script: Optional[Path] = None  # train.py: what msrun re-runs for a parallel job
    sweep: Optional[SweepJob] = None  # set when this run is one job of a multirun
    trial: Optional[TrialLink] = None  # its Optuna trial, when the sweep prunes


# How a sweep's main process tells each job (in this process, a joblib/submitit worker, or
# the msrun workers a job starts) which sweep it belongs to: environment variables, set by the
# sweep callback when the job starts; they survive pickling and re-exec, unlike Hydra state.
SWEEP_RUN_ENV = "SPOREFLOW_SWEEP_RUN"  # the sweep's MLflow parent run id
SWEEP_KEYS_ENV = "SPOREFLOW_SWEEP_KEYS"  # the swept keys, comma-separated (what job names show)
SWEEP_JOB_ENV = "SPOREFLOW_SWEEP_JOB"  # this job's number in the sweep
SWEEP_COPIES_ENV = "SPOREFLOW_SWEEP_COPIES"  # "0": a job that finished before is trained again


@dataclass(frozen=True)
class SweepJob:
    run_id: str  # the sweep's MLflow parent run
    keys: tuple  # swept keys, e.g. ("boost.rho", "boost.sigma")
    job: int
    # a job that finished before may be copied (job.finished_jobs): a grid or a race; not a
    # trial of an Optuna study, which continues by itself and whose trials are new proposals
    copies: bool = True

    def environ(self) -> dict:
        return {
            SWEEP_RUN_ENV: self.run_id,
            SWEEP_KEYS_ENV: ",".join(self.keys),
            SWEEP_JOB_ENV: str(self.job),
            SWEEP_COPIES_ENV: "1" if self.copies else "0",
        }

    @classmethod
    def from_environ(cls, env=os.environ) -> Optional[SweepJob]:
        if not env.get(SWEEP_RUN_ENV):
            return None
        keys = tuple(k for k in env.get(SWEEP_KEYS_ENV, "").split(",") if k)
        copies = env.get(SWEEP_COPIES_ENV, "1") != "0"
        return cls(env[SWEEP_RUN_ENV], keys, int(env.get(SWEEP_JOB_ENV) or 0), copies)

    def label(self, overrides: list[str]) -> str:
        """What differs in this job: "rho=0.4 sigma=0.2" from its overrides of the swept keys
        (a key's last part, unless two swept keys share it; floats to 4 significant digits)."""
        values = {}
        for override in overrides:
            key, _, value = override.lstrip("+~").partition("=")
            if key in self.keys:
                values[key] = value
        lasts = [k.rsplit(".", 1)[-1] for k in self.keys]
        parts = []
        for key, last in zip(self.keys, lasts, strict=False):
            if key in values:
                parts.append(
                    f"{last if lasts.count(last) == 1 else key}={short_value(values[key])}"
                )
        return " ".join(parts)


# How the Optuna sweeper reaches a job's trial (pruning): the sweeper sets the trial's id with
# `hydra.job.env_set`; the sweep callback adds the study (it reads the job's `hydra.sweeper`) so
# msrun workers, which see no Hydra state, inherit the whole link.
TRIAL_ID_ENV = "SPOREFLOW_OPTUNA_TRIAL"
TRIAL_LINK_ENV = "SPOREFLOW_OPTUNA_LINK"


@dataclass(frozen=True)
class TrialLink:
    """A sweep job's Optuna trial: where the study is and how it prunes."""

    storage: str  # the study's storage URL (absolute: the job may run in another directory)
    study: str
    trial_id: int
    pruner: str  # median | hyperband
    min_epochs: int  # every trial trains at least this many epochs
    startup_trials: int  # trials that complete before any is pruned

    def environ(self) -> dict:
        import json

        return {TRIAL_LINK_ENV: json.dumps(self.__dict__, sort_keys=True)}

    @classmethod
    def from_environ(cls, env=os.environ) -> Optional[TrialLink]:
        import json

        return cls(**json.loads(env[TRIAL_LINK_ENV])) if env.get(TRIAL_LINK_ENV) else None


def short_value(value: str) -> str:
    """A swept value as people read it: floats to 4 significant digits, the rest as given."""
    try:
        number = float(value)
    except ValueError:
        return value
    return f"{number:.4g}" if "." in value or "e" in value.lower() else value
