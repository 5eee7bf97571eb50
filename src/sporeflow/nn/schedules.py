"""Per-step learning-rate schedules (the seeds' `get_lr`), as numpy arrays MindSpore optimizers
index by their global step: a resumed run, whose global_step is restored, continues at the
right point of the schedule by construction."""

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
) -> np.ndarray:
    """float32 array of epochs * steps_per_epoch rates.

    warmup: linear from lr_init to lr_max over warmup_epochs; then
    constant: lr_max; linear: towards lr_end, reached one step after the last (so at step i of
    T, lr_max * (1 - i/T) with lr_end 0: Budgeted Training's decay); cosine: half cosine to
    lr_end; step: lr_max * gamma ** (number of step_epochs boundaries passed).
    `total_steps`: the schedule spans that many steps (a budget that is not whole epochs: the
    steps after it, which a stage stopped there never takes, stay at lr_end).
    """
    if name not in NAMES:
        raise ValueError(f"optimizer.schedule.name={name!r}; allowed: {', '.join(NAMES)}")
    length = epochs * steps_per_epoch
    total = length if total_steps is None else min(int(total_steps), length)
    warmup = int(round(warmup_epochs * steps_per_epoch))
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
            passed = sum(1 for e in step_epochs if i >= e * steps_per_epoch)
            rates[i] = lr_max * gamma**passed
    return rates.astype(np.float32)
