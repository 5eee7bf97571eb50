"""The job-outcome file protocol of a sweep: each job leaves `sporeflow_job.json` in its dir
(status, value or error), written by the job's own process (SweepRun.on_job_end), by the
launcher when the cluster's scheduler ended the job first (`record_scheduler_end`), or
inferred by the sweep when the job's process died without a word (`died_outcome`). The
Optuna sweeper writes its trials (TRIALS_FILE) and the study's best (RESULTS_FILE) beside
them. Every file here is written atomically (storage.files): another process reads it."""

from __future__ import annotations

import json
import logging
import traceback
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from sporeflow.core.errors import TrialPruned
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.journal import journals_under, read_records

log = logging.getLogger(__name__)

JOB_FILE = "sporeflow_job.json"
TRIALS_FILE = "optuna_trials.csv"  # written by the Optuna sweeper: trial, job, state, value, params
RESULTS_FILE = "optimization_results.yaml"  # the Optuna sweeper's: the study's best trial


def short_error(error: Any) -> str:
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())[:500]


def job_outcome(job: int, overrides: list[str], ok: bool, value: Any, error: Any) -> dict:
    """What a job that ran reports: COMPLETED with its value, PRUNED with the pruner's reason,
    or FAILED with its error (and the traceback, which cannot travel back to the sweeper)."""
    pruned = error if isinstance(error, TrialPruned) else None
    outcome = {
        "job": job,
        "status": "COMPLETED" if ok else "PRUNED" if pruned else "FAILED",
        "overrides": list(overrides),
    }
    if ok:
        outcome["value"] = value
    elif pruned:
        outcome["error"] = str(pruned)
    else:
        outcome["error"] = short_error(error)
        if isinstance(error, BaseException):
            outcome["traceback"] = "".join(traceback.format_exception(error))
    return outcome


def write_job_outcome(job_dir: Path, outcome: dict) -> None:
    """`<job dir>/sporeflow_job.json`; a failure to write it is a warning (the sweep then counts
    the job by its journal) - the sweep goes on."""
    try:
        write_text_atomic(Path(job_dir) / JOB_FILE, json.dumps(outcome, default=str))
    except OSError as ex:
        log.warning("could not record job %s's outcome: %s", outcome["job"], ex)


def died_outcome(job_dir: Path, interrupted: bool = False) -> dict:
    """The outcome of a job that wrote none: FAILED, with the last thing its journal recorded;
    KILLED when the sweep itself was interrupted (the job was stopped with it)."""
    overrides: list = []
    try:
        overrides = list(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
    except (OSError, ValueError):
        pass
    last = [r for j in journals_under(job_dir) for r in read_records(j)][-1:]
    seen = f"; its journal's last record: {last[0]['op']} (seq {last[0]['seq']})" if last else ""
    why = (
        f"stopped with the sweep{seen}"
        if interrupted
        else "the job's process died without reporting (killed, e.g. SIGKILL or out of memory)"
        + seen
    )
    status = "KILLED" if interrupted else "FAILED"
    return {"job": int(job_dir.name), "status": status, "overrides": overrides, "error": why}


def record_scheduler_end(
    job_dir: Path, job: int, overrides: list[str], verdict: str, status: str = "FAILED"
) -> None:
    """The outcome of a job the cluster's scheduler ended before it could write its own
    (written by the launcher that submitted it): FAILED with the scheduler's account, KILLED
    when the sweep itself was stopped; the parent then ends the job's runs with it
    (sweep_summary.end_job_runs)."""
    job_dir.mkdir(parents=True, exist_ok=True)
    outcome = {
        "job": job,
        "status": status,
        "overrides": overrides,
        "error": verdict,
        "scheduler": True,
        "dir": str(job_dir),
    }
    write_text_atomic(job_dir / JOB_FILE, json.dumps(outcome))


def read_outcomes(sweep_dir: Path | None, started: float, interrupted: bool = False) -> list[dict]:
    """Each job's outcome in `sweep_dir` started since `started` (older job dirs belong to an
    earlier sweep into the same dir): its JOB_FILE, or `died_outcome` when there is none."""
    found = []
    for job_dir in sorted(sweep_dir.glob("*")) if sweep_dir else []:
        # rewritten by each job that uses the dir (the outcome alone: a job that never started)
        written = [job_dir / ".hydra" / "overrides.yaml", job_dir / JOB_FILE]
        if not job_dir.name.isdigit() or not any(
            w.is_file() and w.stat().st_mtime >= started for w in written
        ):
            continue
        try:
            found.append(json.loads((job_dir / JOB_FILE).read_text()))
        except FileNotFoundError:
            found.append(died_outcome(job_dir, interrupted))
        except (OSError, ValueError):
            continue
    return sorted(found, key=lambda o: o["job"])
