"""A stage's settings, resolved once from the job's typed config and the stage's spec: what its
Trainer and hooks read instead of asking the config again (the batch split, whether EMA weights
are ranked, the checkpoint format were each derived in three places before)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sporeflow.config.objective import progress as objective_progress
from sporeflow.config.schema import (
    CallbacksConfig,
    EvalWith,
    LossScaleManager,
    RunConfig,
    SnapshotConfig,
)
from sporeflow.core.context import TrialLink
from sporeflow.stage.spec import StageSpec


@dataclass(frozen=True)
class StageSettings:
    """Frozen: a hook cannot change what another reads."""

    name: str  # the spec's: core.names.StageKind
    epochs: int  # this stage's (stage 2: boost.epochs)
    max_steps: int | None  # a budget that is not whole epochs ends at this global step
    overhead_passes: float  # waited for before its first step: in its cost/passes
    snapshot_dir: Path | None  # stage 1 keeps weight snapshots here
    snapshot: SnapshotConfig  # when and how often
    seed: int  # of the training split's order
    worker_batch: int  # what one worker feeds per step
    global_batch: int  # one optimizer update's batch across the job's workers
    workers: int
    accumulation_steps: int
    ema_ranked: bool  # the EMA weights are ranked (best-k) and exported
    dynamic_loss_scale: bool  # a non-finite loss is an overflow skipped, not a divergence
    checkpoint_format: str  # ckpt | safetensors
    integrated_save: bool  # a sharded network's checkpoints hold whole tensors
    callbacks: CallbacksConfig  # progress bar, logging, evaluation, checkpoints, best-k
    # the validation metric that shows the job's objective while this stage trains (what a
    # pruning sweep's trial is told each epoch; `acc_ema` when EMA weights are ranked), or None
    progress_metric: str | None
    trial: TrialLink | None  # the job's Optuna trial (a pruning sweep's), from its RunContext

    @classmethod
    def of(
        cls,
        run: RunConfig,
        spec: StageSpec,
        worker_batch: int,
        objective: str,
        dim_reduce: bool,
        trial: TrialLink | None = None,
    ) -> StageSettings:
        """From the typed config (job.plan's `plan.run`), the stage's spec and what the plan
        derived: the worker's batch, the job's objective made explicit, whether it is a
        dim-reduce pipeline; `trial`: the job's Optuna trial (its RunContext's)."""
        train = run.train
        ema_ranked = train.ema.eval_with is EvalWith.ema
        shown = objective_progress(objective, dim_reduce)
        progress = shown[1] + ("_ema" if ema_ranked else "") if shown else None
        return cls(
            name=spec.name,
            epochs=spec.epochs,
            max_steps=spec.max_steps,
            overhead_passes=spec.overhead_passes,
            snapshot_dir=spec.snapshot_dir,
            snapshot=run.boost.snapshot,
            seed=run.seed,
            worker_batch=worker_batch,
            global_batch=worker_batch * run.parallel.workers,
            workers=run.parallel.workers,
            accumulation_steps=train.accumulation_steps,
            ema_ranked=ema_ranked,
            dynamic_loss_scale=train.loss_scale_manager is LossScaleManager.dynamic,
            checkpoint_format=run.callbacks.checkpoint.format.value,
            integrated_save=run.parallel.integrated_save,
            callbacks=run.callbacks,
            progress_metric=progress if shown and shown[0] == spec.name else None,
            trial=trial,
        )

    def batching(self, steps_per_epoch: int) -> str:
        """ "2 workers x batch 16 = global batch 32, 450 optimizer updates" (stand-alone:
        "batch 32, ..."), for the stage's epochs (cut at max_steps, the budget arm)."""
        steps = self.epochs * steps_per_epoch
        if self.max_steps is not None:
            steps = min(self.max_steps, steps)
        updates = steps // self.accumulation_steps
        split = (
            f"{self.workers} workers x batch {self.worker_batch} = global "
            if self.workers > 1
            else ""
        )
        return f"{split}batch {self.global_batch}, {updates} optimizer updates"
