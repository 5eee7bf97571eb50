"""Optimizer factories: config keys (`lr`, `momentum`, `weight_decay`) -> a MindSpore optimizer.

Configs name these with `_partial_: true`; the stage supplies `params` once the network exists.
"""
from __future__ import annotations

from mindspore import nn


def momentum(params, lr: float = 0.01, momentum: float = 0.9, weight_decay: float = 0.0,  # noqa: A002
             nesterov: bool = False) -> nn.Optimizer:
    return nn.Momentum(params, learning_rate=lr, momentum=momentum, weight_decay=weight_decay,
                       use_nesterov=nesterov)


def sgd(params, lr: float = 0.1, momentum: float = 0.0, weight_decay: float = 0.0,
        nesterov: bool = False) -> nn.Optimizer:
    return nn.SGD(params, learning_rate=lr, momentum=momentum, weight_decay=weight_decay,
                  nesterov=nesterov)
