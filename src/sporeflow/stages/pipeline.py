"""What `python train.py` runs once the config is valid and this process is a worker: the
pipeline `boost.name` names, looked up in PIPELINES.

boost=none:       one spec, `train`, in its own MLflow run.
boost=dim_reduce: the dim-reduce pipeline (stages.dim_reduce_pipeline): stage 1, PCA,
                  stage 2 and the baselines under one parent MLflow run.
Both go through one StageRunner (stages.runner), which owns each stage's life.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

from omegaconf import DictConfig

from sporeflow.config import objective
from sporeflow.config.facts import is_dim_reduce
from sporeflow.config.schema import BoostName
from sporeflow.core.context import RunContext
from sporeflow.runtime.heap import long_lived_objects_frozen
from sporeflow.runtime.mindspore_context import init_context
from sporeflow.stages import fine_tune, finished_jobs
from sporeflow.stages.dim_reduce_pipeline import DimReducePipeline
from sporeflow.stages.runner import StageRunner
from sporeflow.stages.spec import plain_spec
from sporeflow.storage.run_marker import find_resume_dir
from sporeflow.tracking.tracker import Tracker


def run_pipeline(cfg: DictConfig, ctx: RunContext) -> float:
    """Run every stage the config asks for; returns the job's objective (`sweep.objective`:
    stage 2's accuracy in a pipeline, the final accuracy of a plain run, by default)."""
    worker = init_context(cfg)
    tracker = Tracker.from_config(  # rank 0 writes (a journal in the run dir); others only read
        cfg.tracking, ctx.launch_dir, read_only=not worker.is_main, journal_dir=ctx.run_dir
    )
    with tracker, long_lived_objects_frozen():  # every graph compile collects garbage
        runner = StageRunner(cfg, ctx, tracker, worker)
        copied = finished_jobs.copy_finished(runner)  # a sweep started again: done before
        if copied is not None:
            return objective_value(cfg, copied)
        return objective_value(cfg, PIPELINES[pipeline_name(cfg)](runner))


def run_plain(runner: StageRunner) -> dict:
    """A plain job: one stage in the run dir, or in the dir `resume=` names (its own run)."""
    cfg, ctx = runner.cfg, runner.ctx
    resume_dir = find_resume_dir(cfg.resume, ctx.launch_dir)
    start = None if resume_dir else fine_tune.start_of(cfg, runner.tracker)  # resume: its own
    spec = plain_spec(cfg, resume_dir or ctx.run_dir, start)
    result = runner.run(spec, resume=resume_dir is not None)
    if runner.worker.is_main:
        summary = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items())
        print(
            f"[sporeflow] {result.name}: {summary}, {result.images_per_sec:.0f} images/s "
            f"({result.batching}); weights {result.checkpoint}; {runner.tracker.describe(result.run_id)}",
            file=sys.stderr,
        )
    return result.metrics


def run_dim_reduce(runner: StageRunner) -> dict:
    """A dim-reduce job: stage 1, PCA, stage 2 and the baselines under one parent run."""
    return DimReducePipeline(runner).run()


# `boost.name` -> what runs a job of it: a new kind of job is a function registered here
PIPELINES: dict[str, Callable[[StageRunner], dict]] = {
    BoostName.none.value: run_plain,
    BoostName.dim_reduce.value: run_dim_reduce,
}


def pipeline_name(cfg: DictConfig) -> str:
    name = cfg.boost.name
    return str(getattr(name, "value", name))


def objective_value(cfg: DictConfig, metrics: dict) -> float:
    return float(metrics.get(objective.name(cfg.sweep.objective, is_dim_reduce(cfg)), float("nan")))
