"""The fit loop: built parts + data + callbacks -> trained weights. It only steps; what to
build for a stage, and what to do with the record afterwards, is decided in `stage/` (the Trainer)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

from mindspore import Model, nn
from tqdm.contrib.logging import logging_redirect_tqdm

from sporeflow.core.signals import deferred, raise_if_received
from sporeflow.engine.callbacks import ProgressBar
from sporeflow.engine.hooks import HookBase


@dataclass
class StageParts:
    """A stage's built pieces: what callbacks, resume and export need to reach."""

    network: nn.Cell  # the network being trained (weights exported from it)
    model: Model  # mindspore.Model around the train cell, with an eval network
    state_cells: tuple  # every cell whose parameters a full checkpoint holds
    ema_swap: Callable[[], AbstractContextManager] | None = (
        None  # puts the EMA weights in, when EMA is on
    )
    # forward passes the train cell spent beyond one per image (stage 2's line search), so far
    extra_forwards: Callable[[], float] = lambda: 0.0


class StopOnSignal(HookBase):
    """Ends training at the end of the step a SIGINT/SIGTERM arrived in: inside `fit` the
    handler only records it (core.signals.deferred), and this raises it. Needs no record: it
    answers MindSpore's step end itself."""

    def on_train_step_end(self, run_context):
        raise_if_received()


def fit(
    parts: StageParts, train_data, epochs: int, hooks: list[HookBase], start_epoch: int = 0
) -> None:
    """Train epochs start_epoch+1 .. epochs (nothing when already there).

    Non-sink mode: the hooks act per step (loss, progress, snapshots)."""
    if start_epoch >= epochs:
        return
    bars = any(isinstance(hook, ProgressBar) for hook in hooks)
    every = [StopOnSignal(), *hooks]
    try:
        with deferred(), logging_redirect_tqdm() if bars else nullcontext():  # log above the bar
            parts.model.train(
                epochs,
                train_data,
                callbacks=every,
                dataset_sink_mode=False,
                initial_epoch=start_epoch,
            )
    except BaseException as failure:  # MindSpore calls no on_train_end then: the hooks' is here
        for hook in hooks:  # (a progress bar ends its line before the error's)
            hook.training_raised(failure)
        raise
