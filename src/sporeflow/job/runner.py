"""One runner owns a stage's life: the job's data set (built once), reuse under the
fingerprint's turn, the MLflow run (the job's own, a child of the pipeline's, or the resumed
one), the run marker, training or evaluation, outputs and the run's end status.

Every stage of a job goes through `StageRunner.run` (trained) or `.evaluate` (weights given,
nothing trained); a pipeline only says which specs, in which order."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from sporeflow.config.components import build_dataset
from sporeflow.core.names import JOB_KEY_TAG, STAGE_TAG
from sporeflow.data.base import ImageDataset
from sporeflow.job import finished_jobs, reuse
from sporeflow.job.plan import JobPlan
from sporeflow.job.runs import guarded, record_config, start_job_run
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stage import provenance as made_with
from sporeflow.stage.evaluation import evaluate_weights
from sporeflow.stage.result import StageResult
from sporeflow.stage.settings import StageSettings
from sporeflow.stage.spec import ReuseKey, StageSpec
from sporeflow.stage.trainer import Trainer
from sporeflow.storage.run_marker import read_run_marker, write_run_marker
from sporeflow.tracking.tracker import TrackedRun, Tracker

log = logging.getLogger(__name__)


class StageRunner:
    """Runs the stages of one job (one process's share of it) against one tracker."""

    def __init__(self, plan: JobPlan, tracker: Tracker, worker: Worker):
        self.plan, self.tracker, self.worker = plan, tracker, worker
        # what components are built from, its typed twin (what settings are read from), where
        self.cfg, self.run_config, self.ctx = plan.cfg, plan.run, plan.ctx
        self._data: dict[int, ImageDataset] = {}  # batch size -> the job's data set
        self._job_key: str | None = None

    def data(self, batch_size: int | None = None):
        """The job's data set at a batch size (default: this worker's share), built once."""
        batch = self.plan.worker_batch if batch_size is None else batch_size
        if batch not in self._data:
            built = build_dataset(self.cfg, batch_size=batch)
            if not self._data and built.selection_split == "test":  # said once a job
                log.warning(
                    "dataset.val_split=0: no validation split, so every choice (best "
                    "checkpoints, early stopping, pruning, a sweep's winner) reads the test "
                    "images that also report the result: its accuracy is optimistic"
                )
            self._data[batch] = built
        return self._data[batch]

    # --- the MLflow run of a stage -------------------------------------------------------------
    def open_job_run(self, stage: str, run_dir: Path, resume: bool = False) -> TrackedRun:
        """The job's top-level run (a plain stage or a pipeline), its marker in `run_dir`; when
        resuming, the run that marker names."""
        marker = read_run_marker(run_dir) if resume else {}
        if marker.get("mlflow_run_id"):
            return self._resumed(marker["mlflow_run_id"], 0.0)
        run = self._start_job_run(stage)
        self._mark(run_dir, run, stage)
        return run

    def _resumed(self, run_id: str, system_metrics: float) -> TrackedRun:
        """An existing run continued here, tagged with where and how."""
        run = self.tracker.resume_run(run_id, system_metrics=system_metrics)
        run.set_tags(
            {"resumed_in": str(self.ctx.run_dir), "resume_overrides": " ".join(self.ctx.overrides)}
        )
        return run

    def _start_job_run(self, stage: str) -> TrackedRun:
        """A top-level run with the job's key (job.finished_jobs), when it has one."""
        run = start_job_run(self.tracker, self.plan, stage)
        if finished_jobs.keyed(self):
            run.set_tags({JOB_KEY_TAG: self.job_key()})
        return run

    def job_key(self) -> str:
        """The job's key (job.finished_jobs), made once: its config and provenance (the data
        set it trains on is built once, for this and for training)."""
        if self._job_key is None:
            provenance = made_with.of(self.data(self.run_config.dataset["batch_size"]))
            self._job_key = finished_jobs.job_key(self.cfg, provenance)
        return self._job_key

    def open_run(self, spec: StageSpec, parent: TrackedRun | None, resume: bool) -> TrackedRun:
        """The stage's run: the one its marker names when resuming, else a new one (the job's
        own without a parent, else the parent's child), tagged with the spec."""
        marker = read_run_marker(spec.stage_dir) if resume else {}
        interval = self.run_config.tracking.system_metrics_interval if spec.epochs else 0.0
        if marker.get("mlflow_run_id"):
            run = self._resumed(marker["mlflow_run_id"], interval)
        elif parent is None:
            run = self._start_job_run(spec.name)
            run.set_tags(spec.run_tags())
        else:
            tags = {STAGE_TAG: spec.name}
            run = self.tracker.start_run(
                spec.name, tags=tags, parent=parent, system_metrics=interval
            )
            record_config(run, self.cfg, self.ctx, spec.name, spec.params(self.run_config))
            run.set_tags(spec.run_tags())
        self._mark(spec.stage_dir, run, spec.name)
        return run

    def _mark(self, stage_dir: Path, run: TrackedRun, stage: str) -> None:
        if self.worker.is_main:
            write_run_marker(
                stage_dir, mlflow_run_id=run.run_id, tracking_uri=self.tracker.uri, stage=stage
            )

    # --- a stage's life ------------------------------------------------------------------------
    def run(
        self, spec: StageSpec, parent: TrackedRun | None = None, resume: bool = False
    ) -> StageResult:
        """Train the stage in its own run. Prepared first: what cannot start creates no run and
        changes none (a resumed run keeps its status)."""
        plan = self.plan
        settings = StageSettings.of(
            plan.run, spec, plan.worker_batch, plan.objective, plan.dim_reduce, plan.ctx.trial
        )
        trainer = Trainer(self.cfg, plan.run, settings, spec, self.data(), self.worker, resume)
        run = self.open_run(spec, parent, resume)
        return guarded(run, lambda: trainer.train(run))

    def evaluate(self, spec: StageSpec, weights: dict, parent: TrackedRun) -> StageResult:
        """A stage that trains nothing: `spec.init_weights` overlaid with `weights`, evaluated
        on the job's data set at its global batch (BatchNorm statistics are recomputed on it)."""
        run = self.open_run(spec, parent, resume=False)
        data = self.data(self.run_config.dataset["batch_size"])
        config = self.run_config
        return guarded(run, lambda: evaluate_weights(self.cfg, config, spec, weights, data, run))

    def reused_or_run(
        self,
        spec: StageSpec,
        usable: Callable[[object, Path], StageResult | None],
        train: Callable[[], StageResult],
        allowed: bool = True,
    ) -> StageResult:
        """Under the fingerprint's turn: a finished run with the spec's fingerprint that
        `usable(run, its dir)` accepts, else `train()`; a trained run is shared with other
        machines (reuse.share) before the turn passes."""
        key = spec.reuse
        assert key is not None, f"{spec.name} is not a reusable stage"
        reads = self.tracker.reads
        with reuse.turn(
            self.ctx.launch_dir, self.worker, key.fingerprint, spec.name, reads, key.tag
        ) as lock:
            found = self.find_reusable(spec, key, usable) if allowed else None
            if found is not None:
                return found
            result = train()
            self.share(result, spec)
            if lock is not None:  # rank 0
                reuse.published(self.tracker, spec.name, lock)
            return result

    def find_reusable(self, spec: StageSpec, key: ReuseKey, usable) -> StageResult | None:
        """The newest finished run with the spec's fingerprint that `usable` accepts, or None.
        Several nodes never reuse: a run's files live on one node's disk."""
        if self.worker.multi_node:
            return None
        runs = reuse.usable_runs(self.tracker.reads, key.tag, key.fingerprint, self.ctx.launch_dir)
        for run, run_dir in runs:
            result = usable(run, run_dir)
            if result is not None:
                log.info("reusing %s from MLflow run %s (%s)", spec.name, run.info.run_id, run_dir)
                return result
        self._say_why_not_reused(spec, key)
        return None

    def _say_why_not_reused(self, spec: StageSpec, key: ReuseKey) -> None:
        """A finished run with the same config but other code, MindSpore or data is not reused:
        the newest such run is named with what differs."""
        same_config = reuse.finished_runs(self.tracker.reads, key.config_tag, key.config_digest)
        if same_config:
            why = made_with.differences(same_config[0], spec.provenance)
            log.info(
                "%s: not reusing MLflow run %s (same config): %s",
                spec.name,
                same_config[0].info.run_id,
                "; ".join(why) or "its files are not usable here",
            )

    def share(self, result: StageResult, spec: StageSpec) -> None:
        """A reusable run on a store other machines reach: its files go with it (reuse.share)."""
        if self.worker.is_main and self.tracker.reads.shared and result.run_id is not None:
            reuse.share(self.tracker.run(result.run_id), spec.stage_dir, spec.snapshot_dir)
