"""The job plan: what the entry resolves once, after validation and before any work, for every
layer below it to read instead of deriving it again.

A job's facts used to be derived where each was needed: whether it is a dim-reduce pipeline
(asked four times in preflight alone), which run dir `resume=` continues (resolved in four
places), node 0's dir, the batch split, the objective's name, the store's URI. Here each is
derived once, from the validated config (`plan.cfg`, read-only, what components are built
from) and its typed twin (`plan.run`, the schema's dataclasses, what mypy checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, read_write

from sporeflow.config import objective
from sporeflow.config.facts import first_local_rank, global_batch_size, worker_batch_size
from sporeflow.config.schema import BoostName, RunConfig
from sporeflow.config.unused import unused_settings
from sporeflow.core.context import RunContext
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.storage.run_marker import (
    find_resume_dir,
    is_pipeline_dir,
    node0_run_dir,
    read_run_marker,
    resume_off,
)
from sporeflow.tracking.store import resolve_uri


@dataclass(frozen=True)
class ResumePlan:
    """The run dir a job continues (`resume=`, or the job's own after a SLURM requeue)."""

    run_dir: Path  # this node's: its ranks' checkpoints, snapshots and PCA basis
    node0_dir: Path  # node 0's: the run markers and stage results rank 0 writes
    pipeline: bool  # the dir is a dim-reduce pipeline's (else a plain run's)


@dataclass(frozen=True)
class JobPlan:
    """One job, resolved: its config, where it runs, what it continues, where it records."""

    cfg: DictConfig  # validated, resolved and read-only: what components are built from
    run: RunConfig  # the same config typed by the schema: what code reads its settings from
    ctx: RunContext
    pipeline: str  # `boost.name`: the key of stages.pipeline.PIPELINES
    resume: ResumePlan | None
    store_uri: str  # tracking.uri, else $MLFLOW_TRACKING_URI, else the launch dir's sqlite
    worker_batch: int  # the batch one worker feeds per step
    global_batch: int  # the batch of one optimizer update across the job's workers
    first_local_rank: int  # the rank of this node's first worker
    objective: str  # `sweep.objective` made explicit ("auto" -> "stage2/acc" or "acc")
    unused: tuple[str, ...] = ()  # the command's settings this job will not use, one line each
    requeues: int = 0  # > 0: SLURM requeued the job and it continues its own run dir

    @property
    def dim_reduce(self) -> bool:
        return self.pipeline == BoostName.dim_reduce.value

    @property
    def home(self) -> Path:
        """The dir this node's stages write in: the continued run's, else the new run dir."""
        return self.resume.run_dir if self.resume else self.ctx.run_dir

    @property
    def node0_home(self) -> Path:
        """Node 0's dir of `home`: where rank 0 keeps markers and stage results."""
        if self.resume:
            return self.resume.node0_dir
        return node0_run_dir(self.ctx.run_dir, self.run.parallel.node_rank)


def plan_job(cfg: DictConfig, ctx: RunContext, requeues: int = 0) -> JobPlan:
    """The plan of a validated config (config.validation.validate) run in `ctx`; `requeues`:
    how often SLURM requeued this job (launch.slurm.restart_count). Raises ConfigError for a
    `resume=` that names no run dir, or a run dir of the other kind of job."""
    continues = _continues_after_requeue(cfg, ctx) if requeues else False
    if continues:  # resume=<its run dir>: what the launcher passes its workers too
        cfg = cfg.copy()
        with read_write(cfg):
            cfg.resume = str(ctx.run_dir)
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunConfig), "plan_job takes a validated config"
    pipeline = str(getattr(run.boost.name, "value", run.boost.name))
    return JobPlan(
        cfg=cfg,
        run=run,
        ctx=ctx,
        pipeline=pipeline,
        resume=_resume_plan(cfg.resume, ctx, run.parallel.node_rank, pipeline),
        store_uri=resolve_uri(run.tracking.uri, ctx.launch_dir),
        worker_batch=worker_batch_size(cfg),
        global_batch=global_batch_size(cfg),
        first_local_rank=first_local_rank(cfg),
        objective=objective.name(run.sweep.objective, BoostName.names_dim_reduce(pipeline)),
        unused=tuple(unused_settings(cfg, ctx.overrides)),
        requeues=requeues if continues else 0,
    )


def _continues_after_requeue(cfg: DictConfig, ctx: RunContext) -> bool:
    """Whether a job SLURM requeued continues its run dir: it has its run (on several nodes
    each node continues its own dir when node 0's has the run: rank 0 on node 0 marks every
    run) and no resume= of its own."""
    node0 = node0_run_dir(ctx.run_dir, cfg.parallel.node_rank)
    return resume_off(cfg.resume) and bool(read_run_marker(node0).get("mlflow_run_id"))


def _resume_plan(
    resume: bool | str, ctx: RunContext, node_rank: int, pipeline: str
) -> ResumePlan | None:
    """The run dir `resume=` names on this node, checked to be one this kind of job continues."""
    try:
        run_dir = find_resume_dir(resume, ctx.launch_dir, node_rank)
    except CheckpointError as ex:
        why = str(ex)  # find_resume_dir's own messages already name the key
        raise ConfigError(why if why.startswith("resume=") else f"resume={resume}: {why}") from None
    if run_dir is None:
        return None
    planned = ResumePlan(
        run_dir, node0_run_dir(run_dir, node_rank), is_pipeline_dir(run_dir, node_rank)
    )
    dim_reduce = BoostName.names_dim_reduce(pipeline)
    if dim_reduce and not planned.pipeline:
        raise ConfigError(
            f"resume={resume}: {run_dir} is a plain run's dir; a boost=dim_reduce job continues "
            "only a pipeline's"
        )
    if planned.pipeline and not dim_reduce:
        raise ConfigError(
            f"resume={resume}: {run_dir} is a dim-reduce pipeline's dir; continue it with its "
            "own boost=dim_reduce"
        )
    return planned
