"""What `python train.py` runs once the config is valid and this process is a worker: the
pipeline `boost.name` names, looked up in PIPELINES.

boost=none:       one spec, `train`, in its own MLflow run.
boost=dim_reduce: the dim-reduce pipeline (job.dim_reduce_pipeline): stage 1, PCA,
                  stage 2 and the baselines under one parent MLflow run.
Both go through one StageRunner (job.runner), which owns each stage's life.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import replace

from sporeflow.config import objective
from sporeflow.config.schema import BoostName
from sporeflow.core.names import StageKind
from sporeflow.engine import compile_cache
from sporeflow.job import finished_jobs, reuse
from sporeflow.job.dim_reduce_pipeline import DimReducePipeline
from sporeflow.job.job_result import JobResult
from sporeflow.job.plan import JobPlan
from sporeflow.job.runner import StageRunner
from sporeflow.job.specs import plain_spec
from sporeflow.runtime.heap import long_lived_objects_frozen
from sporeflow.runtime.mindspore_context import init_context
from sporeflow.stage import fine_tune
from sporeflow.stage.result import StageResult
from sporeflow.tracking.tracker import Tracker


def run_pipeline(plan: JobPlan) -> JobResult:
    """Run every stage the plan's config asks for; returns the job's result with its objective
    (`sweep.objective`: stage 2's accuracy in a pipeline, the final accuracy of a plain run, by
    default); for `sweep.objective=[<accuracy>, <cost>]` both, the cost as the job's own metrics
    hold it (a plain job's `cost/passes`, a pipeline's `stage2/passes`): what a multi-objective
    Optuna study is told."""
    worker = init_context(plan.cfg)
    tracker = Tracker.from_config(  # rank 0 writes (a journal in the run dir); others only read
        plan.run.tracking,
        plan.ctx.launch_dir,
        read_only=not worker.is_main,
        journal_dir=plan.ctx.run_dir,
    )
    # every graph compile collects garbage; a sweep's next job here walks only what is new
    with (
        compile_cache.cached(plan.run.runtime, worker.rank),
        tracker,
        reuse.turns_passed(tracker),  # before the tracker ends
        long_lived_objects_frozen(keep=plan.ctx.sweep is not None),
    ):
        runner = StageRunner(plan, tracker, worker)
        copied = finished_jobs.copy_finished(runner)  # a sweep started again: done before
        result = JobResult(copied) if copied is not None else PIPELINES[plan.pipeline](runner)
    return replace(result, objective=job_objective(plan, result.metrics))


def job_objective(plan: JobPlan, metrics: dict) -> float | list[float]:
    """The job's result from its metrics: its objective, or [objective, cost] for a list."""
    found = [objective.metric_key(plan.objective, plan.dim_reduce)]
    if plan.cost:
        found.append(objective.metric_key(plan.cost, plan.dim_reduce))
    values = [float(metrics.get(key, float("nan"))) for key in found]
    return values if plan.cost else values[0]


def run_plain(runner: StageRunner) -> JobResult:
    """A plain job: one stage in the run dir, or in the dir `resume=` names (its own run);
    its metrics as its run records them (`final/val/acc`, `test/acc`, ...)."""
    plan = runner.plan
    resumed = plan.resume is not None
    start = (
        None if resumed else fine_tune.start_of(plan.run.train, runner.tracker.reads)
    )  # resume: its own
    spec = plain_spec(plan.run, plan.home, start)
    result = runner.run(spec, resume=resumed)
    recorded = {
        **result.cost,  # cost/passes: a list objective's cost
        **{f"final/val/{k}": v for k, v in result.metrics.items()},
        **{f"test/{k}": v for k, v in result.test_metrics.items()},
    }
    if runner.worker.is_main:
        summary = ", ".join(
            f"{split} {k}={v:.4f}"
            for split, found in (("val", result.metrics), ("test", result.test_metrics))
            for k, v in found.items()
            if k in ("acc", "loss")
        )
        trained = trained_phrase(result)
        print(
            f"[sporeflow] {result.name}: {summary}, {trained} ({result.batching}); weights "
            f"{result.checkpoint}; {runner.tracker.describe(result.run_id)}",
            file=sys.stderr,
        )
    return JobResult(recorded, result.run_id, result.checkpoint)


def trained_phrase(result: StageResult) -> str:
    """What a stage's result line says of its training: from the steps it took here (a resume
    with no epoch left took none), then its rate, which a stage may not have measured (one
    epoch of one step: that step compiles the graph) - unknown, not "nothing trained"."""
    if result.trained_steps <= 0:
        return "nothing left to train"
    speed = result.images_per_sec
    if math.isfinite(speed):
        return f"{speed:.0f} images/s"
    return "images/s unknown (its only step compiled the graph)"


def run_dim_reduce(runner: StageRunner) -> JobResult:
    """A dim-reduce job: stage 1, PCA, stage 2 and the baselines under one parent run."""
    pipeline = DimReducePipeline(runner)
    metrics = pipeline.run()
    return JobResult(metrics, pipeline.parent.run_id, pipeline.stages[StageKind.stage2].checkpoint)


# `boost.name` -> what runs a job of it: a new kind of job is a function registered here
PIPELINES: dict[str, Callable[[StageRunner], JobResult]] = {
    BoostName.none.value: run_plain,
    BoostName.dim_reduce.value: run_dim_reduce,
}
