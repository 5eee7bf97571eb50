"""The hooks of one stage, by phase, in the order they must run at a step and an epoch end:
guard (stop before anything sees diverged weights) -> measure (snapshots, cost, throughput,
loss, learning rate, eval) -> record (journalled to MLflow, rank 0) -> checkpoints (best-k, epoch checkpoints
with every user hook's state) -> pruning (the sweep's pruner) -> progress (the bar, rank 0) ->
stop for a requeue once SLURM asked (all of this step's and epoch's work done and saved). A
user's hook (`callbacks.hooks`) runs right after the phase its `place` names (engine.hooks:
`measure` by default, so it reads what was measured).

Writing before checkpointing keeps this true: when epoch e's checkpoint exists, epoch e's
metrics are in the journal, so a resumed run continues them exactly."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from sporeflow.config.components import build_hook
from sporeflow.config.facts import checkpoint_format, global_batch_size
from sporeflow.config.schema import EvalWith, LossScaleManager
from sporeflow.dim_reduce.snapshots import SnapshotCallback
from sporeflow.dim_reduce.step import DimReduceStep
from sporeflow.engine.callbacks import (
    BestCheckpoints,
    CheckpointEachEpoch,
    EvalEachEpoch,
    LearningRate,
    ProgressBar,
    RequeueAtSignal,
    StepLoss,
    Throughput,
    optimizer_in,
    rate_used,
)
from sporeflow.engine.cost import CostMeter, StopAtStep
from sporeflow.engine.divergence import DivergenceGuard
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.runtime.mindspore_context import any_rank
from sporeflow.stage import pruning
from sporeflow.stage.writer import MlflowWriter
from sporeflow.tracking.tracker import TrackedRun


@dataclass
class StageHooks:
    """The ordered list `fit` runs, and the members the stage reads after training."""

    ordered: list
    throughput: Throughput
    evaluator: EvalEachEpoch
    user: list[HookBase]  # the configured hooks (their state is saved with each checkpoint)
    cost: CostMeter


def user_hooks(cfg, record: EventRecord) -> list[HookBase]:
    """`callbacks.hooks`, built (validated before any work) and bound to the stage's record."""
    return [build_hook(node).bind(record) for node in cfg.callbacks.hooks]


def _guard(stage, record: EventRecord) -> list:
    if not stage.cfg.callbacks.stop_on_divergence:
        return []
    dynamic = stage.cfg.train.loss_scale_manager is LossScaleManager.dynamic
    return [DivergenceGuard(record, stage.parts.network, tolerate_nonfinite_loss=dynamic)]


def _snapshots(stage, record: EventRecord) -> list:
    if stage.spec.snapshot_dir is None:
        return []
    snap = stage.cfg.boost.snapshot
    return [
        SnapshotCallback(
            stage.parts.network,
            stage.spec.snapshot_dir,
            snap.start_epoch,
            snap.per_epoch,
            record.steps_per_epoch,
            record.step_in_epoch,
        )
    ]


def _cost(stage, record: EventRecord, evaluator: EvalEachEpoch, snapshots: list) -> CostMeter:
    """The stage's cost meter: stage 2's trial forwards from its train cell, the snapshots' and
    evaluations' seconds from the callbacks that spend them."""
    trials = getattr(stage.parts.state_cells[0], "trial_forwards", None)
    return CostMeter(
        record,
        global_batch_size(stage.cfg),
        stage.cfg.train.accumulation_steps,
        extra_forwards=(lambda: float(trials.asnumpy())) if trials is not None else lambda: 0.0,
        snapshot_seconds=lambda: sum(s.seconds for s in snapshots),
        eval_seconds=lambda: evaluator.seconds,
        overhead_passes=stage.spec.overhead_passes,
    )


def _checkpoints(stage, record: EventRecord, user: list[HookBase]) -> list:
    cb_cfg, ema_ranked = stage.cfg.callbacks, stage.cfg.train.ema.eval_with is EvalWith.ema
    kept = []
    if cb_cfg.best.keep:
        kept.append(
            BestCheckpoints(
                record,
                stage.parts.network,
                stage.ckpt_dir,
                cb_cfg.best.monitor + ("_ema" if ema_ranked else ""),
                cb_cfg.best.mode.value,
                cb_cfg.best.keep,
                stage.parts.ema_swap if ema_ranked else None,
                checkpoint_format(stage.cfg),
            )
        )
    every = cb_cfg.checkpoint
    save = stage.cfg.parallel.integrated_save
    kept.append(
        CheckpointEachEpoch(
            record,
            stage.ckpt_dir,
            every.every_n_epochs,
            every.keep_last,
            save,
            user,
            checkpoint_format(stage.cfg),
        )
    )
    return kept


def stage_hooks(stage, record: EventRecord, run: TrackedRun) -> StageHooks:
    """The hooks of `stage` (a stage.trainer.PreparedStage) writing into `record` and `run`:
    sporeflow's own by phase, each user hook right after the phase its `place` names."""
    cfg, main = stage.cfg, stage.worker.is_main
    throughput = Throughput(record, global_batch_size(cfg))  # rank 0's rate x the global batch
    evaluator = EvalEachEpoch(
        record,
        stage.parts.model,
        stage.val_data,
        cfg.callbacks.eval_every_n_epochs,
        stage.parts.ema_swap,
        shown=None if main and cfg.callbacks.progress_bar else False,
    )
    user = user_hooks(cfg, record)
    snapshots = _snapshots(stage, record)
    cost = _cost(stage, record, evaluator, snapshots)
    writer = MlflowWriter(record, run) if main else None
    checkpoints = _checkpoints(stage, record, user)
    reporter = pruning.for_stage(cfg, stage.spec.name, record, stage.worker)
    phases = {
        "guard": _guard(stage, record),
        "measure": [
            *snapshots,
            cost,
            throughput,
            *_stop_at(stage, record),
            *([StepLoss(record, cfg.callbacks.log_every_n_steps)] if main else []),
            *_learning_rate(stage, record, main),
            evaluator,
        ],
        "record": [writer] if writer else [],
        "checkpoints": checkpoints,
        "pruning": [reporter] if reporter else [],  # after the epoch is saved
        "progress": [ProgressBar(record, stage.spec.name)]
        if main and cfg.callbacks.progress_bar
        else [],
    }
    ordered = []
    for phase, own in phases.items():
        ordered += [*own, *(hook for hook in user if hook.place == phase)]
    flush = [writer.write] if writer else []
    agree = partial(any_rank, stage.worker)
    accumulation = cfg.train.accumulation_steps
    ordered.append(RequeueAtSignal(record, checkpoints[-1], accumulation, flush, agree))
    return StageHooks(ordered, throughput, evaluator, user, cost)


def _stop_at(stage, record: EventRecord) -> list:
    """A budget that is not whole epochs ends at its step."""
    return [] if stage.spec.max_steps is None else [StopAtStep(record, stage.spec.max_steps)]


def _learning_rate(stage, record: EventRecord, main: bool) -> list:
    """`train/lr` at each epoch's end (rank 0: what the writer sends), the rate the stage's
    last update used."""
    rate = _rate_of(stage.parts.state_cells)
    return [LearningRate(record, rate)] if main and rate is not None else []


def _rate_of(cells: tuple) -> Callable[[], float | None] | None:
    """What reads the stage's rate: its optimizer's last-used rate (a schedule's entry at the
    optimizer's update count: warm-up, decay, the budget arm's linear decay); for stage 2
    (DimReduceStep, no optimizer) `boost.alpha`, the rate of its step outside the PCA subspace
    (w -= alpha m, read from its Parameter: the value the graph ran with). Stage 2's step inside
    the subspace is quasi-Newton, its length r (1, rho or 0) the line search's choice per step,
    not a rate: it is left out."""
    step = cells[0] if cells else None
    if isinstance(step, DimReduceStep):
        alpha = step.alpha
        return lambda: float(alpha.asnumpy())
    optimizer = optimizer_in(cells)
    return None if optimizer is None else partial(rate_used, optimizer)
