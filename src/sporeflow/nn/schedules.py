"""Per-update learning-rate schedules (the seeds' `get_lr`), as numpy arrays MindSpore optimizers
index by their global step, their count of updates: a resumed run, whose global_step is
restored, continues at the right point of the schedule by construction.

Their settings are in batches and epochs (`steps_per_epoch` batches an epoch, `total_steps`
batches); with gradient accumulation (`accumulation_steps` = k batches an update) the array has
one entry per update: floor(epochs * steps_per_epoch / k), the updates sporeflow's TrainStep
makes in those epochs (its micro-step count runs across an epoch's end, so a partial
accumulation finishes in the next epoch), and a schedule over E epochs ends at their end with
any k."""

from __future__ import annotations

import math
from typing import Annotated

import numpy as np

from sporeflow.core.ranges import NonNegative, Positive

NAMES = ("constant", "linear", "cosine", "step")


def learning_rates(
    name: str,
    lr_max: float,
    steps_per_epoch: int,
    epochs: int,
    warmup_epochs: Annotated[float, NonNegative] = 0,
    lr_init: Annotated[float, NonNegative] = 0.0,
    lr_end: Annotated[float, NonNegative] = 0.0,
    step_epochs=(),
    gamma: Annotated[float, Positive] = 0.1,
    total_steps: int | None = None,
    accumulation_steps: int = 1,
) -> np.ndarray:
    """float32 array of the rates of the floor(epochs * steps_per_epoch / accumulation_steps)
    optimizer updates of `epochs` epochs of `steps_per_epoch` batches (one a batch when
    accumulation_steps is 1).

    warmup: linear from lr_init to lr_max over warmup_epochs; then
    constant: lr_max; linear: towards lr_end, reached one step after the last (so at step i of
    T, lr_max * (1 - i/T) with lr_end 0: Budgeted Training's decay); cosine: half cosine to
    lr_end; step: lr_max * gamma ** (number of step_epochs boundaries passed).
    `total_steps`: the schedule spans the updates of that many batches (a budget that is not
    whole epochs: the updates after it, which a stage stopped there never makes, stay at lr_end).
    With accumulation_steps = k the warm-up is round(warmup_epochs * steps_per_epoch / k)
    updates, and an update counts as in the epoch of its last batch (a step boundary at
    epoch e applies from the first update that ends after e * steps_per_epoch batches).
    """
    if name not in NAMES:
        raise ValueError(f"optimizer.schedule.name={name!r}; allowed: {', '.join(NAMES)}")
    k = int(accumulation_steps)
    if k < 1:
        raise ValueError(f"accumulation_steps={accumulation_steps}: at least 1 batch an update")
    batches = epochs * steps_per_epoch
    length = max(1, batches // k)
    total = length if total_steps is None else max(1, min(int(total_steps), batches) // k)
    warmup = int(round(warmup_epochs * steps_per_epoch / k))
    rates = np.full(length, lr_end, dtype=np.float64)
    for i in range(total):
        if i < warmup:
            rates[i] = lr_init + (lr_max - lr_init) * (i + 1) / warmup
            continue
        progress = (i - warmup) / max(1, total - warmup)
        if name == "constant":
            rates[i] = lr_max
        elif name == "linear":
            rates[i] = lr_end + (lr_max - lr_end) * (1.0 - progress)
        elif name == "cosine":
            rates[i] = lr_end + (lr_max - lr_end) * 0.5 * (1.0 + math.cos(math.pi * progress))
        else:
            last_batch = (i + 1) * k - 1  # the update's last batch, counted from 0
            passed = sum(1 for e in step_epochs if last_batch >= e * steps_per_epoch)
            rates[i] = lr_max * gamma**passed
    return rates.astype(np.float32)
