"""What a launched job tells its trial, and the files a sweep leaves in its sweep dir.

A job's value must be a finite number (in a multi-objective study a list of them, one per
direction); anything else (an exception, None, a string, NaN) makes
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
from typing import Any, List, Optional, Union

from omegaconf import OmegaConf

from sporeflow.core.errors import TrialPruned
from sporeflow.entry.sweep_jobs import JOB_FILE, RESULTS_FILE, TRIALS_FILE
from sporeflow.storage.files import write_text_atomic


@dataclass
class Outcome:
    value: Optional[Union[float, List[float]]]  # a multi-objective study's: one per direction
    error: str = ""  # "Type: message", one line
    traceback: str = ""
    pruned: str = ""  # the pruner's reason: the job stopped early, on purpose

    @property
    def state(self) -> str:
        return "PRUNED" if self.pruned else "COMPLETE" if self.value is not None else "FAIL"


def outcome(ret: Any, width: int = 1, first_of_list: bool = False) -> Outcome:
    """A Hydra JobReturn -> the trial's value (`width` > 1: a list of that many, a
    multi-objective study's) or why it has none. `first_of_list`: a list's first number is the
    value (a sporeflow job of a list objective in a study of one direction)."""
    from hydra.core.utils import JobStatus

    # JobReturn.return_value re-raises a failed job's exception; _return_value holds it
    value = ret._return_value  # noqa: SLF001
    if isinstance(value, TrialPruned):
        return Outcome(None, pruned=str(value))
    if ret.status != JobStatus.COMPLETED:
        return Outcome(None, _one_line(value), _traceback(value, ret))
    if width > 1:
        return _values(value, width)
    if first_of_list and isinstance(value, (list, tuple)) and value:
        value = value[0]
    try:
        number = float(value)
    except (TypeError, ValueError):
        return Outcome(
            None, f"the job returned {value!r} ({type(value).__name__}), not a number to optimise"
        )
    if not math.isfinite(number):
        return Outcome(None, f"the job returned {number}, not a finite number")
    return Outcome(number)


def _values(value: Any, width: int) -> Outcome:
    """A multi-objective job's values: a list or tuple of `width` finite numbers."""
    try:
        numbers = [float(v) for v in value]
    except (TypeError, ValueError):
        return Outcome(
            None,
            f"the job returned {value!r} ({type(value).__name__}), not a list of {width} "
            "numbers (one per hydra.sweeper.direction)",
        )
    if len(numbers) != width:
        return Outcome(
            None,
            f"the job returned {len(numbers)} values, the study has {width} directions "
            "(hydra.sweeper.direction)",
        )
    if not all(math.isfinite(n) for n in numbers):
        return Outcome(None, f"the job returned {numbers}, not finite numbers")
    return Outcome(numbers)


def first(value: Any) -> Any:
    """What optuna_trials.csv's `value` shows: the value, a list's first ("" for none)."""
    if value is None:
        return ""
    return value[0] if isinstance(value, list) else value


def shown_values(value: Any) -> str:
    """A multi-objective value in optuna_trials.csv's `values`: `0.91;120.5`."""
    return "" if value is None else ";".join(repr(float(v)) for v in value)


def shown_params(params: dict) -> str:
    return " ".join(
        f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in params.items()
    )


def pareto_lines(best_trials: list) -> List[str]:
    """The multi-objective study's Pareto set as Optuna finds it (`study.best_trials`: no trial
    of the study dominates these on their values, no uncertainty weighed), a line each."""
    if not best_trials:
        return ["Optuna's Pareto set (study.best_trials): none (no trial completed)"]
    lines = [
        f"Optuna's Pareto set (study.best_trials, {len(best_trials)} trial"
        f"{'s' * (len(best_trials) != 1)}; on values alone - sporeflow's front weighs the seeds):"
    ]
    for trial in best_trials:
        values = ", ".join(f"{v:.4g}" for v in trial.values)
        lines.append(f"  trial {trial.number}: values [{values}] with {shown_params(trial.params)}")
    return lines


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
    """<sweep dir>/optimization_results.yaml (the official plugin's file); the best trial or None.
    A multi-objective study: its `best_trials` (the Pareto set) as the official `solutions`
    (params and values, and the trial's number), returned as a list."""
    if len(study.directions) > 1:
        pareto = sorted(study.best_trials, key=lambda t: t.number)
        solutions = [{"trial": t.number, "params": t.params, "values": t.values} for t in pareto]
        found = {"name": "optuna", "study": study.study_name, "solutions": solutions}
        write_text_atomic(sweep_dir / RESULTS_FILE, OmegaConf.to_yaml(OmegaConf.create(found)))
        return pareto
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
