"""Stop training the step it diverges: a non-finite loss, or non-finite weights at an epoch end
(checked before any checkpoint of that epoch is written, so no diverged file is ever saved)."""

from __future__ import annotations

import numpy as np

from sporeflow.engine.callbacks import loss_value
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase


class TrainingDiverged(Exception):
    """Raised out of Model.train; the stage turns it into the user's message."""

    def __init__(self, epoch: int, step: int, what: str):
        super().__init__(f"diverged at epoch {epoch}, step {step}: {what}")
        self.epoch, self.step, self.what = epoch, step, what


class DivergenceGuard(HookBase):
    """Must come first among the callbacks: it raises before snapshots, evaluation or
    checkpoints see the diverged weights.

    With a dynamic loss scale an overflowing (non-finite) loss is expected: the train step skips
    that update, so only the weights are checked."""

    def __init__(self, record: EventRecord, network, tolerate_nonfinite_loss: bool = False):
        super().__init__()
        self.bind(record)
        self.weights = network.trainable_params()
        self.tolerate_nonfinite_loss = tolerate_nonfinite_loss

    def after_step(self, step: int) -> None:
        if self.tolerate_nonfinite_loss:
            return
        loss = loss_value(self.cb_params.net_outputs)
        if not np.isfinite(loss):
            raise TrainingDiverged(self.cb_params.cur_epoch_num, step, f"loss={loss}")

    def after_epoch(self, epoch: int) -> None:
        bad = [p.name for p in self.weights if not np.isfinite(p.asnumpy()).all()]
        if bad:
            raise TrainingDiverged(
                epoch,
                self.record.global_step(self.cb_params),
                f"non-finite weights in {', '.join(bad[:3])}" + (" ..." if len(bad) > 3 else ""),
            )
