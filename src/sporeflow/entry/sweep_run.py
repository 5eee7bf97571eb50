"""A sweep is one MLflow run: the Hydra callback registered in conf/train.yaml
(`hydra.callbacks.sweep_run`).

on_multirun_start  creates the parent run `sweep-<date>-<time>` (tags: the sweep's overrides,
                   sweeper, launcher, sweep dir, objective) in the main process;
on_job_start       runs wherever the job runs (this process, a joblib worker, a submitit/SLURM
                   task: the callback travels pickled inside Hydra's context) and exports the
                   parent id, the swept keys and the job number as environment variables
                   (context.SweepJob) - msrun workers inherit them too. Not MLFLOW_RUN_ID:
                   MLflow would resume that run and drop the variable;
on_job_end         writes `sporeflow_job.json` (status, value or error) into the job's dir;
on_multirun_end    ends the parent: best job's params and objective, jobs finished/failed/pruned, the
                   table and plots (sweep_report) logged and written into the sweep dir.

When a job raises, Hydra 1.3's BasicSweeper re-raises and never calls on_multirun_end:
app.run_cli calls `end_unfinished(error)`, so the parent still ends (FAILED, or KILLED on
Ctrl-C) with the same summary. Single runs never touch any of this.
"""

from __future__ import annotations

import csv
import json
import logging
import os
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from sporeflow.config import objective, search_space
from sporeflow.core.context import TRIAL_ID_ENV, TRIAL_LINK_ENV, SweepJob, TrialLink
from sporeflow.core.errors import ConfigError, TrialPruned
from sporeflow.core.signals import Interrupted, raise_if_received
from sporeflow.core.uris import redacted
from sporeflow.launch import slurm
from sporeflow.report import sweep_report as report
from sporeflow.report import views
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.journal import is_key, journals_under, read_records
from sporeflow.tracking.store import StoreError, database_refusal
from sporeflow.tracking.sync import sync
from sporeflow.tracking.tracker import Tracker

log = logging.getLogger(__name__)

JOB_FILE = "sporeflow_job.json"
TRIALS_FILE = "optuna_trials.csv"  # written by the Optuna sweeper: trial, job, state, value, params
RESULTS_FILE = "optimization_results.yaml"  # the Optuna sweeper's: the study's best trial
_ACTIVE: list[SweepRun] = []  # sweeps started in this process and not ended yet


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: command-line sweep overrides (a=1,2 / range / choice) and the
    sweeper's `params` (Optuna's search space, or BasicSweeper's), less those the command line
    fixes (config.search_space's rules, which the Optuna sweeper follows)."""
    task = OmegaConf.to_container(config.hydra.overrides.task)
    params = OmegaConf.to_container(config.hydra.sweeper.get("params") or OmegaConf.create({}))
    return [key.lstrip("+~") for key in search_space.build(params, task).keys]


def study_tags(config: DictConfig) -> dict:
    """An Optuna sweep with a storage: the tags naming its study. Every process of the study
    (another machine, a restart) finds the one parent run by them; {} for any other sweep."""
    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != search_space.OPTUNA_SWEEPER or not sweeper.get("storage"):
        return {}
    url = search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd))
    return {"optuna.study": str(sweeper.study_name), "optuna.storage": redacted(str(url))}


def study_parent(tracker: Tracker, study: dict) -> Any:
    """The study's parent run: the first created (start time, then id), so processes that
    created one each at the same moment agree on it; None when there is none yet."""
    quoted = {k: v.replace("'", "\\'") for k, v in study.items()}
    runs = tracker.search_runs(
        "tags.stage = 'sweep' and "
        + " and ".join(f"tags.`{k}` = '{v}'" for k, v in quoted.items()),
        max_results=100,
    )
    return min(runs, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def trial_link(config: DictConfig) -> TrialLink | None:
    """A job of an Optuna sweep with a pruner: where its trial is (the sweeper put the trial's
    id in the job's environment, hydra.job.env_set); None for any other job."""
    trial_id = os.environ.get(TRIAL_ID_ENV)
    sweeper = config.hydra.sweeper
    if not trial_id or sweeper.get("_target_") != search_space.OPTUNA_SWEEPER:
        return None
    if sweeper.get("pruner", "none") == "none":
        return None
    return TrialLink(
        storage=str(search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd))),
        study=sweeper.study_name,
        trial_id=int(trial_id),
        pruner=sweeper.pruner,
        min_epochs=int(sweeper.pruner_min_epochs),
        startup_trials=int(sweeper.n_startup_trials),
    )


def registered_model_name(config: DictConfig) -> str:
    """`sweep.registered_model`, else "<model>-<dataset>" (a plain job run's name)."""
    from sporeflow.stages.runs import base_name

    chosen = config.sweep.registered_model
    return base_name(config) if chosen is None else chosen


def model_stage(key: str) -> str:
    """The stage whose model the objective (a metric key of the job's run) ranks: stage1/acc ->
    stage1, gain -> stage2 (the pipeline's result), final/acc -> train (a plain job)."""
    stage = key.split("/", 1)[0] if "/" in key else "stage2"
    return "train" if stage == "final" else stage


def _short_error(error: Any) -> str:
    text = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else str(error)
    return " ".join(text.split())[:500]


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
    if interrupted:
        return {
            "job": int(job_dir.name),
            "status": "KILLED",
            "overrides": overrides,
            "error": f"stopped with the sweep{seen}",
        }
    return {
        "job": int(job_dir.name),
        "status": "FAILED",
        "overrides": overrides,
        "error": f"the job's process died without reporting (killed, e.g. SIGKILL or out of memory){seen}",
    }


def record_scheduler_end(
    job_dir: Path, job: int, overrides: list[str], verdict: str, status: str = "FAILED"
) -> None:
    """The outcome of a job the cluster's scheduler ended before it could write its own
    (written by the launcher that submitted it): FAILED with the scheduler's account, KILLED
    when the sweep itself was stopped; the parent then ends the job's runs with it
    (SweepRun._end_job_runs)."""
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


class SweepRun(Callback):
    """The MLflow parent run of one multirun (see the module docstring)."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.keys: list[str] = []
        self.sweep_dir: Path | None = None
        self.objective = "auto"
        self.registered_model = ""  # "" = the best job's model is not registered
        self.tracking: dict = {}
        self.launch_dir = Path.cwd()
        self.started = (
            0.0  # when this sweep started: older job dirs in its sweep dir are not its own
        )
        self.resumed_status = ""  # an Optuna study's parent this process continues: its status

    def _tracker(self) -> Tracker:
        """A tracker of this process with its own journal in the sweep dir (made for each use:
        the callback travels pickled to the jobs, a writer process does not)."""
        return Tracker.from_config(
            OmegaConf.create(self.tracking), self.launch_dir, journal_dir=self.sweep_dir
        )

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not config.tracking.enabled or not self._sweeper_accepts(config):
            return
        self.launch_dir = Path(config.hydra.runtime.cwd or Path.cwd())
        self.started = time.time() - 1.0  # file times have coarse resolution on some filesystems
        self.tracking = OmegaConf.to_container(config.tracking, resolve=True)
        self.keys = swept_keys(config)
        self.sweep_dir = Path(config.hydra.sweep.dir).resolve()
        self.objective = config.sweep.objective
        self.registered_model = registered_model_name(config)
        with self._tracker() as tracker:
            self._start(tracker, config)

    @staticmethod
    def _sweeper_accepts(config: DictConfig) -> bool:
        """False for a database store that does not connect, or Optuna sweeper settings the
        sweeper will refuse: no parent run then; the sweeper or the first job refuses them (exit
        2, one line: Hydra turns a callback's exception into a warning)."""
        try:
            if database_refusal(config.tracking.uri):  # each job refuses it (exit 2)
                return False
            if config.hydra.sweeper.get("_target_") == search_space.OPTUNA_SWEEPER:
                sweeper = OmegaConf.to_container(config.hydra.sweeper, resolve=True)
                search_space.checked(sweeper, OmegaConf.to_container(config.hydra.overrides.task))
        except ConfigError:
            return False
        return True

    def _start(self, tracker: Tracker, config: DictConfig) -> None:
        study = study_tags(config)
        found = study_parent(tracker, study) if study else None
        if found is not None:  # an Optuna study's sweep continues (another process, a restart)
            self.run_id, self.resumed_status = found.info.run_id, found.info.status
            tracker.resume_run(self.run_id)
            _ACTIVE.append(self)
            print(
                f"[sporeflow] sweep run {self.run_id} of Optuna study "
                f"{study['optuna.study']!r} continues in {tracker.uri}; this process's jobs "
                f"write under {self.sweep_dir}",
                file=sys.stderr,
            )
            return
        run = tracker.start_run(
            time.strftime("sweep-%Y-%m-%d-%H-%M-%S"),
            tags={
                "stage": "sweep",
                "sweep.overrides": " ".join(OmegaConf.to_container(config.hydra.overrides.task)),
                "sweep.keys": ",".join(self.keys),
                "sweep.dir": str(self.sweep_dir),
                "sweep.sweeper": str(config.hydra.sweeper.get("_target_", "")),
                "sweep.launcher": str(config.hydra.launcher.get("_target_", "")),
                "sweep.objective": self.objective,
                **study,
            },
        )
        # the jobs are tagged with the parent's MLflow id; with the store out of reach, with
        # its journal key (their writers put the id in once the store has the parent)
        self.run_id = tracker.real_id(run, timeout=tracker.drain_timeout) or run.run_id
        if study and self.run_id is not None and not is_key(self.run_id):
            # two processes may have created a parent for the study at once: the first stays
            first = study_parent(tracker, study)
            if first is not None and first.info.run_id != self.run_id:
                tracker.delete_run(self.run_id)
                self.run_id, self.resumed_status = first.info.run_id, first.info.status
                tracker.resume_run(self.run_id)
        if self.run_id is not None:
            _ACTIVE.append(self)
            print(
                f"[sporeflow] sweep run {self.run_id} in {tracker.uri}; jobs write under {self.sweep_dir}",
                file=sys.stderr,
            )

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        raise_if_received()  # an interrupt swallowed where it landed starts no further job
        link = trial_link(config)
        if link is not None:
            os.environ.update(link.environ())
        if self.run_id is None:
            return
        os.environ.update(
            SweepJob(self.run_id, tuple(self.keys), int(config.hydra.job.num)).environ()
        )

    def on_job_end(self, config: DictConfig, job_return: Any, **kwargs: Any) -> None:
        os.environ.pop(TRIAL_LINK_ENV, None)  # the next job in this process has its own trial
        if self.run_id is None or slurm.node_rank() != 0:  # a multi-node job reports from node 0
            return
        from hydra.core.utils import JobStatus

        ok = job_return.status == JobStatus.COMPLETED
        error = job_return._return_value  # noqa: SLF001 - return_value would re-raise it
        pruned = error if isinstance(error, TrialPruned) else None
        outcome = {
            "job": int(config.hydra.job.num),
            "status": "COMPLETED" if ok else "PRUNED" if pruned else "FAILED",
            "overrides": list(config.hydra.overrides.task),
        }
        if ok:
            outcome["value"] = job_return.return_value
        elif pruned:
            outcome["error"] = str(pruned)
        else:
            outcome["error"] = _short_error(error)
            if isinstance(error, BaseException):  # the sweeper reports it (it cannot travel)
                outcome["traceback"] = "".join(traceback.format_exception(error))
        try:
            Path(config.hydra.runtime.output_dir, JOB_FILE).write_text(
                json.dumps(outcome, default=str)
            )
        except OSError as ex:  # the summary will count the job as unknown, the sweep goes on
            log.warning("could not record job %s's outcome: %s", outcome["job"], ex)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.end()

    def outcomes(self, interrupted: bool = False) -> list[dict]:
        """Each started job's outcome: its JOB_FILE, or FAILED when its process died without
        writing one (SIGKILL, out of memory): what its tracking journal shows is the why
        (KILLED when the sweep was interrupted: a job stopped with it writes none)."""
        found = []
        for job_dir in sorted(self.sweep_dir.glob("*")) if self.sweep_dir else []:
            # rewritten by each job that uses the dir (the outcome alone: a job that never started)
            written = [job_dir / ".hydra" / "overrides.yaml", job_dir / JOB_FILE]
            if not job_dir.name.isdigit() or not any(
                w.is_file() and w.stat().st_mtime >= self.started for w in written
            ):
                continue  # not a job, or a job of an earlier sweep into the same sweep dir
            try:
                found.append(json.loads((job_dir / JOB_FILE).read_text()))
            except FileNotFoundError:
                found.append(died_outcome(job_dir, interrupted))
            except (OSError, ValueError):
                continue
        return sorted(found, key=lambda o: o["job"])

    def end(self, error: BaseException | None = None) -> None:
        """End the parent run with what the jobs did; FAILED if a job failed, KILLED when the
        sweep was interrupted. Never raises: a summary must not hide the sweep's own error."""
        if self.run_id is None or self not in _ACTIVE:
            return
        _ACTIVE.remove(self)
        with self._tracker() as tracker:
            self._end(tracker, error)

    def _end(self, tracker: Tracker, error: BaseException | None) -> None:
        if is_key(self.run_id):  # created while the store was out of reach: has it now?
            found = tracker.get_run(self.run_id)
            self.run_id = found.info.run_id if found is not None else self.run_id
        parent = tracker.run(self.run_id)
        interrupted = isinstance(error, (KeyboardInterrupt, Interrupted))
        outcomes = self.outcomes(interrupted)
        if not outcomes and error is None and self.resumed_status:
            parent.end(self.resumed_status)  # a study with all its trials: as it was
            print(
                f"[sporeflow] sweep: no job ran; the study's run {self.run_id} stays as it was "
                "(an Optuna study that already has hydra.sweeper.n_trials trials continues "
                "with a larger n_trials)",
                file=sys.stderr,
            )
            return
        if not outcomes and error is None:
            tracker.delete_run(self.run_id)
            print(
                "[sporeflow] sweep: no job ran, so it leaves no MLflow run (an Optuna study that "
                "already has hydra.sweeper.n_trials trials continues with a larger n_trials)",
                file=sys.stderr,
            )
            return
        for ended in (o for o in outcomes if o.get("scheduler")):
            self._end_job_runs(tracker, ended)
        failed = [o for o in outcomes if o["status"] == "FAILED"]
        count = Counter(o["status"] for o in outcomes)  # COMPLETED, FAILED, PRUNED, KILLED
        status = (
            "KILLED" if interrupted else "FAILED" if failed or error is not None else "FINISHED"
        )
        lines = []
        try:
            if is_key(self.run_id):
                raise StoreError(f"the store {tracker.uri} does not have the sweep's run yet")
            lines = self._summarise(tracker, parent, failed, count)
        except Exception as ex:  # noqa: BLE001 - the parent must still end
            log.warning("sweep summary failed: %s", ex)
        if failed:
            parent.set_tags(
                {
                    "sporeflow.failure": "; ".join(f"job {o['job']}: {o['error']}" for o in failed)[
                        :5000
                    ]
                }
            )
        elif error is not None:
            parent.set_tags({"sporeflow.failure": _short_error(error)})
        parent.end(status)
        print(
            "\n".join(
                [
                    f"[sporeflow] sweep {status}: {count['COMPLETED']} jobs finished, "
                    f"{count['FAILED']} failed"
                    + (f", {count['KILLED']} stopped with it" if count["KILLED"] else "")
                    + (
                        f", {count['PRUNED']} pruned by the Optuna pruner"
                        if count["PRUNED"]
                        else ""
                    )
                    + f"; MLflow run {self.run_id} ({tracker.uri})",
                    *lines,
                ]
            ),
            file=sys.stderr,
        )

    def _end_job_runs(self, tracker: Tracker, outcome: dict) -> None:
        """A job the scheduler ended: what its journals still hold is sent first (SLURM kills
        what a SIGTERM did not end within its KillWait), then its runs (the job's and its
        stages') that did not finish say why in `sporeflow.failure`, and one still RUNNING ends
        KILLED."""
        try:
            sync(Path(outcome["dir"]))
            top = tracker.search_runs(
                f"tags.`sweep.run_id` = '{self.run_id}' and tags.`sweep.job` = '{outcome['job']}'"
            )
            runs = top + [
                child
                for run in top
                for child in tracker.search_runs(f"tags.mlflow.parentRunId = '{run.info.run_id}'")
            ]
            for run in runs:
                if run.info.status == "FINISHED":
                    continue
                tracker.run(run.info.run_id).set_tags({"sporeflow.failure": outcome["error"]})
                if run.info.status == "RUNNING":
                    tracker.run(run.info.run_id).end("KILLED")
        except Exception as ex:  # noqa: BLE001 - the parent must still end
            log.warning("could not mark job %s's runs: %s", outcome["job"], ex)

    def _summarise(self, tracker: Tracker, parent, failed: list[dict], count: Counter) -> list[str]:
        jobs = report.sweep_jobs(tracker, self.run_id, self.keys)
        key = report.objective_key(jobs, self.objective)
        ranked = report.ranked(jobs, key)
        header, rows = report.table_rows(ranked, self.keys)
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        for fmt, name in (
            ("text", "comparison.txt"),
            ("markdown", "comparison.md"),
            ("csv", "comparison.csv"),
        ):
            (self.sweep_dir / name).write_text(report.render(header, rows, fmt))
            parent.log_artifact(self.sweep_dir / name)
        plots = [report.gain_plot(ranked, self.keys, key, self.sweep_dir / "gain_vs_params.png")]
        best = ranked[0] if ranked and key in ranked[0].metrics else None
        if best is not None:
            plots.append(report.curves_plot(tracker, best, self.sweep_dir / "best_job_curves.png"))
        for plot in filter(None, plots):
            parent.log_artifact(plot)
        parent.log_metrics(
            {
                "jobs_finished": count["COMPLETED"],
                "jobs_pruned": count["PRUNED"],
                "jobs_failed": count["FAILED"],
            },
            0,
        )
        lines = [report.render(header, rows).rstrip()]
        if key:
            found = sorted({m for j in jobs for m in j.metrics})
            view = views.sweep_view(self.run_id, self.keys, key, found)
            tracker.set_experiment_tag(
                views.TAG_PREFIX + views.share_key(self.run_id), views.encode(view)
            )
            parent.set_tags({"sweep.view": views.share_key(self.run_id)})
        if best is not None:
            parent.log_params({f"best.{k}": v for k, v in best.values.items()})
            parent.log_metrics({f"best/{key}": best.metrics[key]}, 0)
            parent.set_tags({"sweep.best_run_id": best.run_id, "sweep.best_job": str(best.number)})
            tracker.run(best.run_id).set_tags({"sporeflow.best_in_sweep": "true"})
            lines.append(f"best: job {best.number} ({best.name}) {key}={best.metrics[key]:.4f}")
            if self.registered_model:
                parent.register_model(
                    best.run_id,
                    model_stage(key),
                    self.registered_model,
                    {"objective": key, "value": f"{best.metrics[key]:.6g}", "sweep": self.run_id},
                )
                lines.append(
                    f"its model: registered model {self.registered_model!r}, a new version"
                )
        lines += self._record_trials(tracker, parent, jobs)
        label = lambda o: SweepJob(self.run_id, tuple(self.keys), o["job"]).label(o["overrides"])  # noqa: E731
        lines += [f"failed: job {o['job']} ({label(o)}): {o['error']}" for o in failed]
        written = ", ".join(p.name for p in filter(None, plots))
        lines.append(
            f"table{' and plots' if written else ''}: {self.sweep_dir}/comparison.txt"
            + (f", {written}" if written else "")
        )
        parent.flush()
        return lines

    def _record_trials(self, tracker: Tracker, parent, jobs: list) -> list[str]:
        """An Optuna sweep: each trial's value on the parent (step = trial number), the trial
        number on each job's run, the best trial tagged."""
        path = self.sweep_dir / TRIALS_FILE
        if not path.is_file():
            return []
        with open(path, newline="") as f:
            trials = list(csv.DictReader(f))
        run_of_job = {j.number: j.run_id for j in jobs}
        for trial in trials:
            if trial["value"]:
                parent.log_metrics({"trial/value": float(trial["value"])}, int(trial["trial"]))
            if int(trial["job"]) in run_of_job:
                tracker.run(run_of_job[int(trial["job"])]).set_tags(
                    {"optuna.trial": trial["trial"]}
                )
        parent.log_artifact(path)
        best = self._best_trial(trials)
        if best is None:
            return []
        parent.set_tags({"optuna.best_trial": str(best["trial"])})
        return [
            f"Optuna: {len(trials)} trials this run, best trial of the study {best['trial']} "
            f"value {float(best['value']):.4f}"
        ]

    def _best_trial(self, trials: list[dict]) -> dict | None:
        """The study's best trial (the sweeper's RESULTS_FILE: other processes' trials count
        too), else the best of this process's."""
        path = self.sweep_dir / RESULTS_FILE
        try:
            if path.stat().st_mtime >= self.started:  # not an earlier sweep's in this dir
                found = OmegaConf.load(path)
                return {"trial": int(found.best_trial), "value": float(found.best_value)}
        except (OSError, ValueError, AttributeError):
            pass
        complete = [t for t in trials if t["state"] == "COMPLETE"]
        if not complete:
            return None
        sign = 1.0 if objective.maximize(self.objective) else -1.0  # "auto" is an accuracy
        return max(complete, key=lambda t: sign * float(t["value"]))


def end_unfinished(error: BaseException | None) -> None:
    """End every sweep of this process that Hydra did not end (a job raised, or Ctrl-C)."""
    for sweep in list(_ACTIVE):
        sweep.end(error)
