"""The job plan: what the entry resolves once, after validation and before any work, for every
layer below it to read instead of deriving it again.

A job's facts used to be derived where each was needed: whether it is a dim-reduce pipeline
(asked four times in preflight alone), which run dir `resume=` continues (resolved in four
places), node 0's dir, the batch split, the objective's name. Here each is
derived once, from the validated config (`plan.cfg`, read-only, what components are built
from) and its typed twin (`plan.run`, the schema's dataclasses, what mypy checks).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf, read_write

from sporeflow.config import objective
from sporeflow.config.components import build_model
from sporeflow.config.facts import first_local_rank, global_batch_size, worker_batch_size
from sporeflow.config.schema import BoostName, RunConfig
from sporeflow.config.strategies import check_parallel_plan
from sporeflow.config.unused import unused_settings
from sporeflow.config.validation import validate
from sporeflow.core.context import RunContext
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.storage.run_marker import Continuation, continuation, node0_run_dir


@dataclass(frozen=True)
class JobPlan:
    """One job, resolved: its config, where it runs, what it continues, where it records."""

    cfg: DictConfig  # validated, resolved and read-only: what components are built from
    run: RunConfig  # the same config typed by the schema: what code reads its settings from
    ctx: RunContext
    pipeline: str  # `boost.name`: the key of job.pipeline.PIPELINES
    resume: Continuation | None  # what the job continues (None: a new run)
    worker_batch: int  # the batch one worker feeds per step
    global_batch: int  # the batch of one optimizer update across the job's workers
    first_local_rank: int  # the rank of this node's first worker
    objective: str  # `sweep.objective` made explicit ("auto" -> "val/stage2/acc" or "val/acc")
    cost: str = ""  # a list objective's cost (`cost/passes`, `stage2/passes`): returned second
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


def plan_job(composed: DictConfig, ctx: RunContext, requeues: int = 0) -> JobPlan:
    """The plan of a composed config run in `ctx`: validated (config.validation: every bad
    key at once), its parallel plan checked, and resolved; `requeues`: how often SLURM
    requeued this job (launch.slurm.restart_count). Raises ConfigError naming the key: a bad
    setting, a `resume=` that names no run dir or a run dir of the other kind of job."""
    cfg = validate(composed)
    check_parallel_plan(cfg, lambda: build_model(cfg))
    run = OmegaConf.to_object(cfg)
    assert isinstance(run, RunConfig), "plan_job takes a validated config"
    pipeline = run.boost.name.value
    resume = _continued(run, ctx, requeues, pipeline)
    if resume is not None and resume.requeued:  # what the launcher passes its workers too
        cfg = cfg.copy()
        with read_write(cfg):
            cfg.resume = str(resume.run_dir)
        run.resume = str(resume.run_dir)  # the typed twin says the same
    return JobPlan(
        cfg=cfg,
        run=run,
        ctx=ctx,
        pipeline=pipeline,
        resume=resume,
        worker_batch=worker_batch_size(cfg),
        global_batch=global_batch_size(cfg),
        first_local_rank=first_local_rank(cfg),
        objective=objective.name(
            objective.primary(run.sweep.objective), BoostName.names_dim_reduce(pipeline)
        ),
        cost=objective.cost_of(run.sweep.objective, BoostName.names_dim_reduce(pipeline)),
        unused=tuple(unused_settings(cfg, ctx.overrides)),
        requeues=requeues if resume is not None and resume.requeued else 0,
    )


def _continued(
    run: RunConfig, ctx: RunContext, requeues: int, pipeline: str
) -> Continuation | None:
    """What the job continues, checked to be a run dir this kind of job continues."""
    resume, node_rank = run.resume, run.parallel.node_rank
    try:
        found = continuation(resume, ctx.launch_dir, ctx.run_dir, node_rank, requeues > 0)
    except CheckpointError as ex:
        why = str(ex)  # find_resume_dir's own messages already name the key
        raise ConfigError(why if why.startswith("resume=") else f"resume={resume}: {why}") from None
    if found is None:
        return None
    dim_reduce = BoostName.names_dim_reduce(pipeline)
    if dim_reduce and not found.pipeline:
        raise ConfigError(
            f"resume={resume}: {found.run_dir} is a plain run's dir; a boost=dim_reduce job "
            "continues only a pipeline's"
        )
    if found.pipeline and not dim_reduce:
        raise ConfigError(
            f"resume={resume}: {found.run_dir} is a dim-reduce pipeline's dir; continue it "
            "with its own boost=dim_reduce"
        )
    return found
