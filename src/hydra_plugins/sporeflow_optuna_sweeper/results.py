"""What a launched job tells its trial, and the files a sweep leaves in its sweep dir.

A job's value must be a finite number; anything else (an exception, None, a string, NaN) makes
its trial FAIL with the reason, type and traceback kept: the search goes on and the sweep exits
non-zero at the end naming every failed trial.
"""

# (no `from __future__ import annotations`: Hydra imports plugin modules without putting them in
# sys.modules, and dataclasses cannot then resolve string annotations)
import csv
import io
import json
import math
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from sporeflow.core.errors import TrialPruned
from sporeflow.entry.sweep_jobs import JOB_FILE, RESULTS_FILE, TRIALS_FILE
from sporeflow.storage.files import write_text_atomic


@dataclass
class Outcome:
    value: Optional[float]
    error: str = ""  # "Type: message", one line
    traceback: str = ""
    pruned: str = ""  # the pruner's reason: the job stopped early, on purpose

    @property
    def state(self) -> str:
        return "PRUNED" if self.pruned else "COMPLETE" if self.value is not None else "FAIL"


def outcome(ret: Any) -> Outcome:
    """A Hydra JobReturn -> the trial's value or why it has none."""
    from hydra.core.utils import JobStatus

    # JobReturn.return_value re-raises a failed job's exception; _return_value holds it
    value = ret._return_value  # noqa: SLF001
    if isinstance(value, TrialPruned):
        return Outcome(None, pruned=str(value))
    if ret.status != JobStatus.COMPLETED:
        return Outcome(None, _one_line(value), _traceback(value, ret))
    try:
        number = float(value)
    except (TypeError, ValueError):
        return Outcome(
            None, f"the job returned {value!r} ({type(value).__name__}), not a number to optimise"
        )
    if not math.isfinite(number):
        return Outcome(None, f"the job returned {number}, not a finite number")
    return Outcome(number)


def _one_line(error: Any) -> str:
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())[:1000]


def _traceback(error: Any, ret: Any) -> str:
    """The exception's traceback; from a worker process (joblib, submitit) the traceback does not
    travel with the exception, so the job's own record (sweep_run's JOB_FILE) is read."""
    if isinstance(error, BaseException) and error.__traceback__ is not None:
        return "".join(traceback.format_exception(error))
    try:
        recorded = json.loads((Path(ret.working_dir) / JOB_FILE).read_text())
        return str(recorded.get("traceback", ""))
    except (OSError, TypeError, ValueError):
        return ""


def write_trials(sweep_dir: Path, records: list) -> None:
    """<sweep dir>/optuna_trials.csv: trial, job, state, value, error, params (the sweep's parent
    run reads it to name each job's trial)."""
    write_csv(sweep_dir / TRIALS_FILE, records)


def write_csv(path: Path, records: list) -> None:
    """`records` (dicts) as a CSV file, every key a column, written atomically (the sweep's
    parent run may read it at any moment)."""
    columns = list(dict.fromkeys(k for r in records for k in r))
    out = io.StringIO(newline="")
    writer = csv.DictWriter(out, fieldnames=columns)
    writer.writeheader()
    writer.writerows(records)
    write_text_atomic(path, out.getvalue())


def write_best(study: Any, sweep_dir: Path) -> Any:
    """<sweep dir>/optimization_results.yaml (the official plugin's file); the best trial or None."""
    try:
        best = study.best_trial
    except ValueError:  # no trial completed
        return None
    found = {
        "name": "optuna",
        "study": study.study_name,
        "best_trial": best.number,
        "best_params": best.params,
        "best_value": best.value,
    }
    write_text_atomic(sweep_dir / RESULTS_FILE, OmegaConf.to_yaml(OmegaConf.create(found)))
    return best
