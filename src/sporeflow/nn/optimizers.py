"""Optimizer factories: config keys -> a MindSpore optimizer with parameter groups and an LR schedule.

Configs name these with `_partial_: true`; the stage supplies `params` (the network's trainable
parameters), `steps_per_epoch` (batches), `epochs` and `accumulation_steps` (batches per
optimizer update: the schedule has one rate per update) once it knows them. Weight decay goes through
parameter groups that exempt BatchNorm gamma/beta and biases (the seeds' `init_group_params`),
and its value is a graph input (`DecayRate`): a sweep over `optimizer.weight_decay` trains on
one compiled graph.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

import numpy as np
from mindspore import Parameter, Tensor, nn
from mindspore.common import dtype as mstype

from sporeflow.core.errors import ConfigError
from sporeflow.core.ranges import Decay, NonNegative, Positive
from sporeflow.nn.schedules import learning_rates

NO_DECAY = ("beta", "gamma", "bias")
DECAY_NAME = "weight_decay"  # the decay's Parameter among the optimizer's (checkpoints, the pool)
RATE_NAME = "learning_rate"  # MindSpore's Parameter of the rate: the float or per-update table


class DecayRate(nn.Cell):
    """The weight decay as a graph input. MindSpore calls a Cell given as a group's weight decay
    at every step (its dynamic weight decay) instead of folding a float into the graph; this one
    returns a Parameter, so two decay values run one compiled graph (engine.graph_pool copies the
    value in like any other parameter). The step's arithmetic is MindSpore's own either way
    (tests/unit/test_optim.py compares it with a float decay bit for bit)."""

    def __init__(self, value: float):
        super().__init__()
        self.rate = Parameter(Tensor(float(value), mstype.float32), requires_grad=False)

    def construct(self, global_step):
        return self.rate


def group_params(
    params, weight_decay: Annotated[float, NonNegative], as_input: bool = True
) -> list:
    """[{decayed params, DecayRate}, {gamma/beta/bias, 0}, {order_params}] when decay is on
    (`as_input=False`: the float, for MindSpore's nn.SGD, which refuses a decay Cell)."""
    params = list(params)
    if not weight_decay:
        return params
    decay = [p for p in params if not any(key in p.name for key in NO_DECAY)]
    no_decay = [p for p in params if any(key in p.name for key in NO_DECAY)]
    return [
        {"params": decay, "weight_decay": DecayRate(weight_decay) if as_input else weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
        {"order_params": params},
    ]


def decay_registered(opt: nn.Optimizer) -> nn.Optimizer:
    """`opt` with its DecayRate in its cell tree. MindSpore keeps a group's decay Cell in a
    tuple attribute, where no parameter walk finds it: no checkpoint would hold it and the graph
    pool could not copy it (it refuses such cells). As a child cell its Parameter is one of the
    optimizer's, named DECAY_NAME."""
    held = opt.weight_decay if isinstance(opt.weight_decay, tuple) else ()
    for cell in (c for c in held if isinstance(c, nn.Cell)):  # group_params makes one at most
        opt.weight_decay_input = cell
    for _, cell in opt.cells_and_names():
        if isinstance(cell, DecayRate):
            cell.rate.name = DECAY_NAME
    return opt


def schedule_of(
    lr: Annotated[float, Positive],
    schedule: Mapping[str, Any] | None,
    steps_per_epoch: int | None,
    epochs: int | None,
    accumulation_steps: int = 1,
):
    """A per-update LR Tensor (`accumulation_steps` batches an update), or the plain float when
    the schedule is constant without warm-up."""
    schedule = dict(schedule or {})
    name = schedule.pop("name", "constant")
    if name == "constant" and not schedule.get("warmup_epochs"):
        return lr
    if not steps_per_epoch or not epochs:
        raise ValueError("an LR schedule needs steps_per_epoch and epochs")
    rates = learning_rates(
        name, lr, steps_per_epoch, epochs, accumulation_steps=accumulation_steps, **schedule
    )
    return Tensor(padded(rates))


PAD_BASE = 4  # schedule lengths are padded to a power of this


def padded(rates: np.ndarray) -> np.ndarray:
    """The per-update rates, padded with the last one up to a power of four. The optimizer
    indexes them by its step count, a graph input; their length is a shape compiled into the
    graph: so schedules of similar length train on one compiled graph (engine.graph_pool). A
    power of four, not two: a sweep's budget arms, whose length follows each job's stage-2 cost
    (123 and 164 updates in the README sweep), fell on both sides of 128 and compiled two train
    graphs; at most 4x the table's float32 entries (16 MB for a million updates) is the price."""
    length = 1
    while length < len(rates):
        length *= PAD_BASE
    return np.concatenate([rates, np.full(length - len(rates), rates[-1], rates.dtype)])


def momentum(
    params,
    lr: Annotated[float, Positive] = 0.01,
    momentum: Annotated[float, Decay] = 0.9,
    weight_decay: Annotated[float, NonNegative] = 0.0,
    nesterov: bool = False,
    schedule: Mapping | None = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    accumulation_steps: int = 1,
) -> nn.Optimizer:
    """v = momentum * v + g; w -= lr * v, or with nesterov w -= lr * (g + momentum * v).

    MindSpore 2.10's CPU `nn.Momentum(use_nesterov=True)` takes the plain step (checked against
    numpy in tests/unit/test_optim.py); its `nn.SGD` takes the Nesterov step, so nesterov runs
    on nn.SGD (the same update otherwise: dampening 0, v starts at the first gradient)."""
    groups, rate = (
        group_params(params, weight_decay, as_input=not nesterov),
        schedule_of(lr, schedule, steps_per_epoch, epochs, accumulation_steps),
    )
    if nesterov:
        return nn.SGD(groups, rate, momentum=momentum, nesterov=True)
    return decay_registered(nn.Momentum(groups, rate, momentum=momentum))


def sgd(
    params,
    lr: Annotated[float, Positive] = 0.1,
    momentum: Annotated[float, Decay] = 0.0,
    weight_decay: Annotated[float, NonNegative] = 0.0,
    nesterov: bool = False,
    schedule: Mapping | None = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    accumulation_steps: int = 1,
) -> nn.Optimizer:
    if nesterov and momentum <= 0:
        raise ConfigError(f"optimizer.nesterov=true needs optimizer.momentum > 0, not {momentum}")
    return nn.SGD(  # its decay stays a constant of the graph: nn.SGD refuses a decay Cell
        group_params(params, weight_decay, as_input=False),
        schedule_of(lr, schedule, steps_per_epoch, epochs, accumulation_steps),
        momentum=momentum,
        nesterov=nesterov,
    )


def adam(
    params,
    lr: Annotated[float, Positive] = 0.001,
    beta1: Annotated[float, Decay] = 0.9,
    beta2: Annotated[float, Decay] = 0.999,
    eps: Annotated[float, Positive] = 1e-8,
    weight_decay: Annotated[float, NonNegative] = 0.0,
    schedule: Mapping | None = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    accumulation_steps: int = 1,
) -> nn.Optimizer:
    return decay_registered(
        nn.Adam(
            group_params(params, weight_decay),
            schedule_of(lr, schedule, steps_per_epoch, epochs, accumulation_steps),
            beta1=beta1,
            beta2=beta2,
            eps=eps,
        )
    )


def adamw(
    params,
    lr: Annotated[float, Positive] = 0.001,
    beta1: Annotated[float, Decay] = 0.9,
    beta2: Annotated[float, Decay] = 0.999,
    eps: Annotated[float, Positive] = 1e-8,
    weight_decay: Annotated[float, NonNegative] = 0.01,
    schedule: Mapping | None = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    accumulation_steps: int = 1,
) -> nn.Optimizer:
    return decay_registered(
        nn.AdamWeightDecay(
            group_params(params, weight_decay) if weight_decay else list(params),
            schedule_of(lr, schedule, steps_per_epoch, epochs, accumulation_steps),
            beta1=beta1,
            beta2=beta2,
            eps=eps,
            weight_decay=0.0,
        )
    )


def adagrad(
    params,
    lr: Annotated[float, Positive] = 0.01,
    accum: float = 0.1,
    weight_decay: Annotated[float, NonNegative] = 0.0,
    schedule: Mapping | None = None,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    accumulation_steps: int = 1,
) -> nn.Optimizer:
    return decay_registered(
        nn.Adagrad(
            group_params(params, weight_decay),
            accum=accum,
            learning_rate=schedule_of(lr, schedule, steps_per_epoch, epochs, accumulation_steps),
        )
    )
