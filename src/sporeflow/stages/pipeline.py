"""What `python train.py` runs once the config is valid and this process is a worker.

boost=none:       one stage of plain training, one MLflow run.
boost=dim_reduce: the dim-reduce pipeline (stages.dim_reduce_pipeline): stage 1, PCA,
                  stage 2 and the baselines under one parent MLflow run.
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig

from sporeflow.config import objective
from sporeflow.config.schema import BoostName
from sporeflow.core.context import RunContext
from sporeflow.runtime.mindspore_context import init_context
from sporeflow.stages.dim_reduce_pipeline import DimReducePipeline
from sporeflow.stages.stage import tracked_stage
from sporeflow.storage.run_marker import find_resume_dir
from sporeflow.tracking.tracker import Tracker


def run_pipeline(cfg: DictConfig, ctx: RunContext) -> float:
    """Run every stage the config asks for; returns the job's objective (`sweep.objective`:
    stage 2's accuracy in a pipeline, the final accuracy of a plain run, by default)."""
    worker = init_context(cfg)
    tracker = Tracker.from_config(  # rank 0 writes (a journal in the run dir); others only read
        cfg.tracking, ctx.launch_dir, read_only=not worker.is_main, journal_dir=ctx.run_dir
    )
    with tracker:
        if cfg.boost.name is BoostName.dim_reduce:
            return objective_value(cfg, DimReducePipeline(cfg, ctx, tracker, worker).run())
        resume_dir = find_resume_dir(cfg.resume, ctx.launch_dir)
        result = tracked_stage(tracker, "train", cfg, ctx, resume_dir, worker=worker)
        if worker.is_main:
            summary = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items())
            print(
                f"[sporeflow] {result.name}: {summary}, {result.images_per_sec:.0f} images/s "
                f"({result.batching}); weights {result.checkpoint}; {tracker.describe()}",
                file=sys.stderr,
            )
        return objective_value(cfg, result.metrics)


def objective_value(cfg: DictConfig, metrics: dict) -> float:
    dim_reduce = cfg.boost.name is BoostName.dim_reduce
    return float(metrics.get(objective.name(cfg.sweep.objective, dim_reduce), float("nan")))
