"""Stages and their MLflow runs: what `python train.py` does once the config is valid.

boost=none: one stage of plain training, one MLflow run. (dim_reduce adds stage 2 and
baselines as child runs of a parent run; see issue 6.)
"""
from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sporeflow.checkpoints import find_resume_dir, read_run_marker, write_run_marker
from sporeflow.context import RunContext
from sporeflow.engine.trainer import StageResult, train_stage
from sporeflow.runtime import init_context
from sporeflow.tracking import Tracker, TrackedRun, flatten

log = logging.getLogger(__name__)


def _run_name(cfg: DictConfig) -> str:
    if cfg.tracking.run_name:
        return cfg.tracking.run_name
    model = str(cfg.model._target_).rsplit(".", 1)[-1].lower()
    data = str(cfg.dataset._target_).rsplit(".", 1)[-1].lower()
    return f"{model}-{data}"


def _record_config(run: TrackedRun, cfg: DictConfig, ctx: RunContext, stage: str) -> None:
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    run.log_params(flatten(container))
    run.set_tags({"stage": stage, "experiment": cfg.experiment or "", "git_commit": ctx.git_commit or "",
                  "overrides": " ".join(ctx.overrides), "run_dir": str(ctx.run_dir),
                  "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", "")})
    run.log_text(OmegaConf.to_yaml(container), "config/config.yaml")
    run.log_text("\n".join(ctx.overrides) + "\n", "config/overrides.txt")
    if ctx.hydra_dir is not None:
        run.log_artifacts(sorted(ctx.hydra_dir.glob("*.yaml")), "config/hydra")


def tracked_stage(tracker: Tracker, stage: str, cfg: DictConfig, ctx: RunContext,
                  resume_dir: Path | None = None) -> StageResult:
    """Run one stage inside its own MLflow run; the run ends FAILED/KILLED if the stage raises.

    Resuming continues in `resume_dir` (its checkpoints, its MLflow run).
    """
    stage_dir = resume_dir or ctx.run_dir
    marker = read_run_marker(stage_dir) if resume_dir else {}
    if marker.get("mlflow_run_id"):
        run = tracker.resume_run(marker["mlflow_run_id"])
        run.set_tags({"resumed_in": str(ctx.run_dir), "resume_overrides": " ".join(ctx.overrides)})
    else:
        run = tracker.start_run(_run_name(cfg), tags={"stage": stage})
        _record_config(run, cfg, ctx, stage)
    write_run_marker(stage_dir, mlflow_run_id=run.run_id, tracking_uri=tracker.uri, stage=stage)
    try:
        result = train_stage(stage, cfg, stage_dir, run, resume=resume_dir is not None)
    except KeyboardInterrupt:
        run.end("KILLED")
        raise
    except BaseException:
        run.end("FAILED")
        raise
    run.end("FINISHED")
    return result


def run_pipeline(cfg: DictConfig, ctx: RunContext) -> float:
    """Run every stage the config asks for; returns the final eval accuracy."""
    init_context(cfg)
    tracker = Tracker.from_config(cfg.tracking, ctx.launch_dir)
    resume_dir = find_resume_dir(cfg.resume, ctx.launch_dir)
    result = tracked_stage(tracker, "train", cfg, ctx, resume_dir)
    summary = ", ".join(f"{k}={v:.4f}" for k, v in result.metrics.items())
    print(f"[sporeflow] {result.name}: {summary}, {result.images_per_sec:.0f} images/s; "
          f"weights {result.checkpoint}; MLflow {tracker.uri}", file=sys.stderr)
    return float(result.metrics.get("acc", float("nan")))
