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
from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig

from sporeflow.config.components import build_hook
from sporeflow.dim_reduce.snapshots import TakeSnapshots
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
from sporeflow.engine.loop import StageParts
from sporeflow.runtime.mindspore_context import Worker, any_rank
from sporeflow.stage import pruning
from sporeflow.stage.settings import StageSettings
from sporeflow.stage.writer import StageWriter


class Trainer(Protocol):
    """What the hooks are built from: a stage.trainer.Trainer (named here, not imported: the
    trainer imports this module to build its hooks)."""

    cfg: DictConfig  # only for the user's hooks (`callbacks.hooks`: components)
    settings: StageSettings
    record: EventRecord
    worker: Worker
    parts: StageParts
    val_data: Any
    ckpt_dir: Path
    writer: StageWriter

    def save_checkpoint(self, cb: Any, epoch_step: int = 0) -> Path: ...
    def state_dict(self) -> dict: ...
    def snapshot_seconds(self) -> float: ...
    def eval_seconds(self) -> float: ...


@dataclass
class StageHooks:
    """A stage's hooks by phase, the user's, the stop for a requeue (last), and the members the
    trainer reads after training or passes on to the others."""

    phases: dict[str, list[HookBase]]
    user: list[HookBase]  # the configured hooks (their state is saved with each checkpoint)
    requeue: RequeueAtSignal
    throughput: Throughput
    evaluator: EvalEachEpoch
    cost: CostMeter
    checkpoints: CheckpointEachEpoch
    snapshots: list[TakeSnapshots]


def stage_hooks(trainer: Trainer) -> StageHooks:
    """The hooks of `trainer`'s stage writing into its record and (rank 0) its writer:
    sporeflow's own by phase; the trainer places each user hook after the phase it names.
    Built module by module (engine.callbacks, engine.cost, the guard, stage 1's snapshots,
    pruning, the user's); `phases` gives the order they run in."""
    settings, record, main = trainer.settings, trainer.record, trainer.worker.is_main
    callbacks, parts = settings.callbacks, trainer.parts
    shown = main and callbacks.progress_bar
    throughput = Throughput(record, settings.global_batch)  # rank 0's rate x the global batch
    every = callbacks.eval_every_n_epochs
    evaluator = EvalEachEpoch(
        record, parts.model, trainer.val_data, every, parts.ema_swap, None if shown else False
    )
    checkpoints = _each_epoch(trainer)
    best = _best(trainer)
    losses = [StepLoss(record, callbacks.log_every_n_steps)] if main else []
    rate = _rate_of(parts.state_cells)
    rates = [LearningRate(record, rate)] if main and rate is not None else []
    bars: list[HookBase] = [ProgressBar(record, settings.name)] if shown else []
    writer = trainer.writer.follow(record) if main else None
    requeue = RequeueAtSignal(
        record,
        trainer.save_checkpoint,
        callbacks.checkpoint.every_n_epochs,
        settings.accumulation_steps,
        [writer.write] if writer else [],
        partial(any_rank, trainer.worker),
    )
    cost = _cost(trainer)
    stop_at = [] if settings.max_steps is None else [StopAtStep(record, settings.max_steps)]
    guard = _guard(trainer)
    snapshots = _snapshots(trainer)
    reporter = pruning.for_stage(settings, record, trainer.worker)
    phases: dict[str, list[HookBase]] = {
        "guard": guard,
        "measure": [*snapshots, cost, throughput, *stop_at, *losses, *rates, evaluator],
        "record": [writer] if writer else [],
        "checkpoints": [*best, checkpoints],
        "pruning": [reporter] if reporter else [],  # after the epoch is saved
        "progress": bars,
    }
    user = [build_hook(node).bind(record) for node in trainer.cfg.callbacks.hooks]
    return StageHooks(phases, user, requeue, throughput, evaluator, cost, checkpoints, snapshots)


def _each_epoch(trainer: Trainer) -> CheckpointEachEpoch:
    """Full checkpoints with what the trainer's hooks remember (`Trainer.state_dict`)."""
    settings = trainer.settings
    every = settings.callbacks.checkpoint
    return CheckpointEachEpoch(
        trainer.record,
        trainer.ckpt_dir,
        every.every_n_epochs,
        every.keep_last,
        settings.integrated_save,
        trainer.state_dict,
        settings.checkpoint_format,
    )


def _best(trainer: Trainer) -> list[HookBase]:
    """The best `keep` by the validation metric `monitor` (of the EMA weights when ranked)."""
    settings = trainer.settings
    best, ema_ranked = settings.callbacks.best, settings.ema_ranked
    if not best.keep:
        return []
    return [
        BestCheckpoints(
            trainer.record,
            trainer.parts.network,
            trainer.ckpt_dir,
            best.monitor + ("_ema" if ema_ranked else ""),
            best.mode.value,
            best.keep,
            trainer.parts.ema_swap if ema_ranked else None,
            settings.checkpoint_format,
        )
    ]


def _cost(trainer: Trainer) -> CostMeter:
    """The stage's cost meter: the train cell's extra forwards (stage 2's line search), the
    snapshots' and evaluations' seconds through the trainer."""
    settings = trainer.settings
    return CostMeter(
        trainer.record,
        settings.global_batch,
        settings.accumulation_steps,
        extra_forwards=trainer.parts.extra_forwards,
        snapshot_seconds=trainer.snapshot_seconds,
        eval_seconds=trainer.eval_seconds,
        overhead_passes=settings.overhead_passes,
    )


def _guard(trainer: Trainer) -> list[HookBase]:
    settings = trainer.settings
    if not settings.callbacks.stop_on_divergence:
        return []
    network, dynamic = trainer.parts.network, settings.dynamic_loss_scale
    return [DivergenceGuard(trainer.record, network, tolerate_nonfinite_loss=dynamic)]


def _snapshots(trainer: Trainer) -> list[TakeSnapshots]:
    settings = trainer.settings
    if settings.snapshot_dir is None:
        return []
    snap, network = settings.snapshot, trainer.parts.network
    directory = settings.snapshot_dir
    return [TakeSnapshots(trainer.record, network, directory, snap.start_epoch, snap.per_epoch)]


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
