"""The end of a sweep, as its parent run and the console show it: the table (best first) and
plots in the sweep dir and on the parent, the saved MLflow view, the best job (tagged, its
model registered), the Optuna trials, and the runs of jobs the cluster's scheduler ended.

Reads only the MLflow store and the files the jobs left (sweep_jobs), so `sporeflow compare
--sweep` and the sweep's parent show the same thing."""

from __future__ import annotations

import csv
import logging
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from sporeflow.config import objective
from sporeflow.core.context import SweepJob
from sporeflow.core.names import (
    BEST_IN_SWEEP_TAG,
    DECISION_TAG,
    FAILURE_TAG,
    FRONT_TAG,
    LEADER_REASON_TAG,
    LEADER_TAG,
    PARENT_RUN_TAG,
    SWEEP_BEST_RUN_TAG,
    SWEEP_JOB_TAG,
    SWEEP_RUN_ID_TAG,
    SWEEP_VIEW_TAG,
    TIED_WITH_TAG,
)
from sporeflow.entry.sweep_jobs import RESULTS_FILE, TRIALS_FILE
from sporeflow.entry.sweep_study import model_stage
from sporeflow.report import front, importance, views
from sporeflow.report import sweep_report as report
from sporeflow.report.decision import Decision, Leader
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.sync import sync
from sporeflow.tracking.tracker import TrackedRun, Tracker

log = logging.getLogger(__name__)
TABLES = (("text", "comparison.txt"), ("markdown", "comparison.md"), ("csv", "comparison.csv"))
POINTS = "points.txt"  # one row per point: pooled over its seeds, against the best


@dataclass
class Sweep:
    """What a sweep's parent run is about (kept by the sweep callback, pickled to its jobs)."""

    run_id: str | None = None
    keys: list[str] = field(default_factory=list)
    sweep_dir: Path | None = None
    objective: str = "auto"  # the first of `sweep.objective`: what ranks and decides a winner
    cost: str = ""  # its second, a cost (config.objective): the sweep ends with a Pareto front
    registered_model: str = ""  # "" = the best job's model is not registered
    started: float = 0.0  # when this sweep started: older job dirs in its sweep dir are not its own
    study_name: str = ""  # an Optuna sweep's study in a storage: its importances are the study's
    study_storage: str = ""


def status_line(status: str, count: Counter, run_id: str, uri: str, why: str = "") -> str:
    """ "[sporeflow] sweep FINISHED: 6 jobs finished, 0 failed; MLflow run ... (uri)". A sweep
    failed by something other than a job that raised (its sweeper: a trial whose job returned
    NaN) says that first, and its jobs' counts after it, so the line does not read "FAILED: 2
    jobs finished, 0 failed"."""
    killed = f", {count['KILLED']} stopped with it" if count["KILLED"] else ""
    pruned = f", {count['PRUNED']} pruned by the Optuna pruner" if count["PRUNED"] else ""
    if why:
        jobs = f"{why}; its jobs: {count['COMPLETED']} ran to their end, {count['FAILED']} raised"
    else:
        jobs = f"{count['COMPLETED']} jobs finished, {count['FAILED']} failed"
    return f"[sporeflow] sweep {status}: {jobs}{killed}{pruned}; MLflow run {run_id} ({uri})"


def end_job_runs(tracker: Tracker, sweep_run_id: str, outcome: dict) -> None:
    """A job the scheduler ended: what its journals still hold is sent first (SLURM kills
    what a SIGTERM did not end within its KillWait), then its runs (the job's and its
    stages') that did not finish say why in `sporeflow.failure`, and one still RUNNING ends
    KILLED."""
    try:
        sync(Path(outcome["dir"]))
        top = tracker.reads.search_runs(
            f"tags.`{SWEEP_RUN_ID_TAG}` = '{sweep_run_id}' and tags.`{SWEEP_JOB_TAG}` = '{outcome['job']}'"
        )
        children = [
            child
            for run in top
            for child in tracker.reads.search_runs(f"tags.{PARENT_RUN_TAG} = '{run.info.run_id}'")
        ]
        for run in top + children:
            if run.info.status == "FINISHED":
                continue
            tracker.run(run.info.run_id).set_tags({FAILURE_TAG: outcome["error"]})
            if run.info.status == "RUNNING":
                tracker.run(run.info.run_id).end("KILLED")
    except Exception as ex:  # noqa: BLE001 - the parent must still end
        log.warning("could not mark job %s's runs: %s", outcome["job"], ex)


class Summary:
    """Writes one sweep's summary into its dir and its parent run; `lines()` for the console."""

    def __init__(self, tracker: Tracker, parent: TrackedRun, sweep: Sweep):
        self.tracker, self.parent, self.sweep = tracker, parent, sweep
        self._jobs: list = []  # the sweep's jobs as `lines` read them

    def lines(self, failed: list[dict], count: Counter) -> list[str]:
        sweep = self.sweep
        found = report.decided(
            self.tracker.reads, sweep.run_id, sweep.keys, sweep.objective, sweep.cost
        )
        jobs, key, decision = found.jobs, found.key, found.decision
        self._jobs = jobs
        header, rows = report.table_rows(jobs, sweep.keys)
        self._tables(header, rows)
        best = found.leading_job
        plots = self._plots(jobs, key, best)
        decided = self._front(found, plots) if sweep.cost else []
        self.parent.log_metrics(
            {
                "jobs_finished": count["COMPLETED"],
                "jobs_pruned": count["PRUNED"],
                "jobs_failed": count["FAILED"],
            },
            0,
        )
        lines = [report.render(header, rows).rstrip()]
        leader = found.leader
        if decision is not None and leader is not None:
            points = report.render(*decision.rows(key, leader.point))
            self.parent.log_artifact(write_text_atomic(self.sweep.sweep_dir / POINTS, points))
            lines.insert(0, points)
        if key:
            self._view(found, sorted({m for j in jobs for m in j.metrics}))
        lines += self._best(found, best)
        lines += self._importance_lines(jobs, key, decision, plots) if key else []
        lines += self._trials(jobs)
        lines += [f"failed: job {o['job']} ({self._label(o)}): {o['error']}" for o in failed]
        written = ", ".join(p.name for p in plots)
        where = f"{sweep.sweep_dir}/comparison.txt" + (f", {written}" if written else "")
        lines.append(f"table{' and plots' if written else ''}: {where}")
        self.parent.flush()
        return lines + decided

    def _importance_lines(
        self, jobs: list, key: str, decision: Decision | None, plots: list[Path]
    ) -> list[str]:
        """The importances' line (and figure), or one line saying why none are given: where
        the decision separates no point from the best, an importance would only rank noise."""
        if decision is not None and decision.others and not any(v.worse for v in decision.others):
            return [
                f"importances: none: {key} does not separate the points (none is worse than "
                "the best at 5%), so no setting can be said to matter"
            ]
        found = self._importances(jobs, key)
        if found is None:
            return []
        plot = importance.figure(found, self.sweep.sweep_dir / importance.FIGURE)
        if plot is not None:
            self.parent.log_artifact(plot)
            plots.append(plot)
        return [found.line()]

    def _front(self, summary: report.SweepSummary, plots: list[Path]) -> list[str]:
        """A sweep of two objectives, accuracy and cost (report.front, decided with the rest in
        report.decided): one line per point off the front (what beats it, how, at what Holm p),
        then the front and which of its points leads; on the parent the tag `sporeflow.front`,
        front.csv, `front/<row>/...` metrics and front.png (added to `plots`). Never fails the
        sweep: a failure is a warning and a line."""
        cost, key, found = self.sweep.cost, summary.key, summary.front
        try:
            if found is None:
                return [f"front: none (no point has both per-image {key} outcomes and a {cost})"]
            header, rows = found.rows(key)
            table = self.sweep.sweep_dir / front.TABLE
            self.parent.log_artifact(write_text_atomic(table, report.render(header, rows, "csv")))
            self.parent.log_metrics(front.metrics(found), 0)
            self.parent.set_tags({FRONT_TAG: "; ".join(p.label for p in found.front)[:4000]})
        except Exception as ex:  # noqa: BLE001 - the front must not fail a finished sweep
            log.warning("the accuracy-cost front failed: %s", ex)
            return [f"front: not decided ({ex})"]
        plot = front.figure(found, self.sweep.sweep_dir / front.FIGURE, key)
        if plot is not None:
            self.parent.log_artifact(plot)
            plots.append(plot)
        return [*found.beaten_lines(), found.line(key), summary.front_leader()]

    def _importances(self, jobs: list, key: str) -> importance.Importances | None:
        """Which settings mattered (report.importance), as `importance/<param>` metrics on the
        parent: an Optuna sweep's study as it is, any other sweep's finished points as a study
        built in memory; None (nothing recorded) below 4 points or with one varied setting."""
        try:
            study = None
            if self.sweep.study_name and self.sweep.study_storage:
                study = importance.load_study(self.sweep.study_name, self.sweep.study_storage)
            if study is None:
                study = importance.study_of_jobs(jobs, self.sweep.keys, key)
            found = importance.evaluate(study)
        except Exception as ex:  # noqa: BLE001 - importances must not fail a finished sweep
            log.warning("parameter importances failed: %s", ex)
            return None
        if found is not None:
            self.parent.log_metrics(found.metrics(), 0)
        return found

    def _label(self, outcome: dict) -> str:
        job = SweepJob(self.sweep.run_id, tuple(self.sweep.keys), outcome["job"])
        return job.label(outcome["overrides"])

    def _tables(self, header, rows) -> None:
        for fmt, name in TABLES:
            path = write_text_atomic(self.sweep.sweep_dir / name, report.render(header, rows, fmt))
            self.parent.log_artifact(path)

    def _plots(self, ranked, key, best) -> list[Path]:
        sweep_dir, keys = self.sweep.sweep_dir, self.sweep.keys
        plots = [report.gain_plot(ranked, keys, key, sweep_dir / "gain_vs_params.png")]
        if best is not None:
            plots.append(
                report.curves_plot(self.tracker.reads, best, sweep_dir / "best_job_curves.png")
            )
        plots = [p for p in plots if p is not None]
        for plot in plots:
            self.parent.log_artifact(plot)
        return plots

    def _view(self, summary: report.SweepSummary, metrics: list[str]) -> None:
        """The sweep's saved view of MLflow's UI (columns, sort, charts) on the experiment,
        sorted by each job's `sweep/rank` (the leader's first: SweepSummary.ranks)."""
        run_id = self.sweep.run_id
        for job_run, rank in summary.ranks().items():
            self.tracker.run(job_run).log_metrics({views.RANK: rank}, 0, flush=True)
        view = views.sweep_view(run_id, self.sweep.keys, summary.key, metrics, views.RANK)
        self.tracker.set_experiment_tag(
            views.TAG_PREFIX + views.share_key(run_id), views.encode(view)
        )
        self.parent.set_tags({SWEEP_VIEW_TAG: views.share_key(run_id)})

    def _best(self, summary: report.SweepSummary, best) -> list[str]:
        """The decision and the leader (report.decision.lead) in lines and as tags of the
        parent and the leader's job's run; the leader's job's params and objective on the
        parent and its model registered. No leader: nothing tagged best, nothing registered."""
        key, decision, leader = summary.key, summary.decision, summary.leader
        verdict = decision_tags(decision, leader)
        self.parent.set_tags(verdict)
        if decision is None:
            if best is None:
                return []
            said = f"job {best.number} ({best.name}) {key}={best.metrics[key]:.4f}"
            lines = [
                f"best: {said} (no per-image tie test for a {key} objective: ranked, not decided)"
            ]
            return lines + self._mark(best, key, verdict, False)
        on_test = report.selected_on_test(self._jobs)
        lines = [decision.line(key, "test" if on_test else "validation")]
        assert leader is not None  # a decision has a leader (or says none)
        lines.append(leader.line())
        if leader.point is None or best is None:
            return lines + ([summary.answer] if summary.answer else [])
        point = leader.point
        said = f"job {best.number} ({best.name}) {key}={best.metrics[key]:.4f}"
        seeds = f"{len(point.seeds)} seeds pooled, " if len(point.seeds) > 1 else ""
        lines.append(f"  its {seeds}{key} {point.accuracy:.4f}; its job: {said}")
        lines += self._reported(point, key, on_test)
        if summary.answer:
            lines.append(summary.answer)
        return lines + self._mark(best, key, verdict, decision.kind == "winner")

    def _mark(self, best, key: str, verdict: dict[str, str], winner: bool) -> list[str]:
        """The job that speaks for the sweep: its params and objective on the parent, tagged
        on its run, its model registered (when `sweep.registered_model` names one)."""
        self.parent.log_params({f"best.{k}": v for k, v in best.values.items()})
        self.parent.log_metrics({f"best/{key}": best.metrics[key]}, 0)
        self.parent.set_tags({SWEEP_BEST_RUN_TAG: best.run_id, "sweep.best_job": str(best.number)})
        self.tracker.run(best.run_id).set_tags(
            {BEST_IN_SWEEP_TAG: "true" if winner else "false", **verdict}
        )
        name = self.sweep.registered_model
        if not name:
            return []
        value = f"{best.metrics[key]:.6g}"
        tags = {"objective": key, "value": value, "sweep": self.sweep.run_id, **verdict}
        number = self.parent.register_model(
            best.run_id, model_stage(key), name, tags, self.tracker.drain_timeout
        )
        kind = verdict.get(DECISION_TAG, "undecided")
        return [f"its model: {registered(name, number)}, tagged {kind}"]

    def _reported(self, point, key: str, on_test: bool) -> list[str]:
        """The chosen point on the test images, the estimate nothing chose (its metrics on the
        parent: `best/test/value`, `best/test/ci_low|ci_high`, `best/optimism`), and how much
        validation flattered it; on test-chosen points (dataset.val_split=0) a warning."""
        tested = report.reported(self.tracker.reads, self._jobs, point, key)
        if tested is None:
            return []
        low, high = tested.ci95
        optimism = point.accuracy - tested.accuracy
        self.parent.log_metrics(
            {
                "best/test/value": tested.accuracy,
                "best/test/ci_low": low,
                "best/test/ci_high": high,
                "best/optimism": optimism,
            },
            0,
        )
        return [report.reported_line(point, tested, on_test)]

    def _trials(self, jobs: list) -> list[str]:
        """An Optuna sweep: each trial's value on the parent (step = trial number), the trial
        number on each job's run, the best trial tagged."""
        path = self.sweep.sweep_dir / TRIALS_FILE
        if not path.is_file():
            return []
        with open(path, newline="") as f:
            trials = list(csv.DictReader(f))
        run_of_job = {j.number: j.run_id for j in jobs}
        values = {int(t["trial"]): float(t["value"]) for t in trials if t["value"]}
        for number, value in values.items():  # a trial of several seeds is a row per job
            self.parent.log_metrics({"trial/value": value}, number)
        for trial in trials:
            if int(trial["job"]) in run_of_job:
                self.tracker.run(run_of_job[int(trial["job"])]).set_tags(
                    {"optuna.trial": trial["trial"]}
                )
        self.parent.log_artifact(path)
        ran = len({t["trial"] for t in trials})
        pareto = pareto_trials(self.sweep)
        if pareto is not None:  # a multi-objective study: Optuna's Pareto set, no single best
            self.parent.set_tags({"optuna.best_trials": ",".join(map(str, pareto))[:4000]})
            named = ", ".join(map(str, pareto)) if pareto else "none"
            return [
                f"Optuna: {ran} trials this run; the study's Pareto set (Optuna's best_trials, "
                f"on values alone): trials {named}"
            ]
        best = best_trial(self.sweep, trials)
        if best is None:
            return []
        self.parent.set_tags({"optuna.best_trial": str(best["trial"])})
        return [
            f"Optuna: {ran} trials this run, best trial of the study {best['trial']} "
            f"value {float(best['value']):.4f}"
        ]


def decision_tags(decision: Decision | None, leader: Leader | None = None) -> dict[str, str]:
    """The decision and the leader as tags (the parent's, the leader's job's, its registered
    version's): `sporeflow.decision` winner or tie, what the best ties with, and the leader's
    point (or `none`) with the rule's reason."""
    if decision is None:
        return {}
    tags = {DECISION_TAG: decision.kind}
    if decision.kind == "tie":
        tags[TIED_WITH_TAG] = "; ".join(p.label for p in decision.tied)[:4000]
    if leader is not None:
        tags[LEADER_TAG] = leader.label[:4000]
        tags[LEADER_REASON_TAG] = leader.reason[:4000]
    return tags


def pareto_trials(sweep: Sweep) -> list[int] | None:
    """A multi-objective study's Pareto set (Optuna's `best_trials`, the sweeper's RESULTS_FILE
    `solutions`) as trial numbers; None for a study of one direction (or no file of this sweep)."""
    path = sweep.sweep_dir / RESULTS_FILE
    try:
        if path.stat().st_mtime < sweep.started:
            return None
        found = OmegaConf.load(path)
    except (OSError, ValueError):
        return None
    solutions = found.get("solutions") if hasattr(found, "get") else None
    if solutions is None:
        return None
    return [int(s["trial"]) for s in solutions]


def best_trial(sweep: Sweep, trials: list[dict]) -> dict | None:
    """The study's best trial (the sweeper's RESULTS_FILE: other processes' trials count
    too), else the best of this process's."""
    path = sweep.sweep_dir / RESULTS_FILE
    try:
        if path.stat().st_mtime >= sweep.started:  # not an earlier sweep's in this dir
            found = OmegaConf.load(path)
            return {"trial": int(found.best_trial), "value": float(found.best_value)}
    except (OSError, ValueError, AttributeError):
        pass
    complete = [t for t in trials if t["state"] == "COMPLETE"]
    if not complete:
        return None
    sign = 1.0 if objective.maximize(sweep.objective) else -1.0  # "auto" is an accuracy
    return max(complete, key=lambda t: sign * float(t["value"]))


def registered(name: str, version: str | None) -> str:
    """How the console names a new registry version: the URI that loads it, when known."""
    if version:
        return f"models:/{name}/{version}"
    if version == "":
        return f"not registered as {name!r} (the run logged no model)"
    return f"a new version of {name!r} (its number once the tracking writer has sent it)"
