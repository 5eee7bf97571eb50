"""The fit loop: built parts + data + callbacks -> trained weights. It only steps; what to
build for a stage, and what to do with the record afterwards, is decided in `stages/`."""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Callable

from mindspore import Model, nn


@dataclass
class StageParts:
    """A stage's built pieces: what callbacks, resume and export need to reach."""

    network: nn.Cell  # the network being trained (weights exported from it)
    model: Model  # mindspore.Model around the train cell, with an eval network
    state_cells: tuple  # every cell whose parameters a full checkpoint holds
    ema_swap: Callable[[], AbstractContextManager] | None = (
        None  # puts the EMA weights in, when EMA is on
    )


def fit(parts: StageParts, train_data, epochs: int, callbacks: list, start_epoch: int = 0) -> None:
    """Train epochs start_epoch+1 .. epochs (nothing when already there).

    Non-sink mode: the callbacks act per step (loss, progress, snapshots)."""
    if start_epoch < epochs:
        parts.model.train(
            epochs,
            train_data,
            callbacks=callbacks,
            dataset_sink_mode=False,
            initial_epoch=start_epoch,
        )
