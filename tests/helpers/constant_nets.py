"""User networks that hold a constant of one kind, which their `construct` computes with: two
values are two graphs (engine.graph_pool, engine.compile_cache), never one. Hydra can name each
(`model._target_=helpers.constant_nets.ScaledMLP +model.scale=0.0`, with tests/ on the path)."""

from __future__ import annotations

import enum

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from sporeflow.models.mlp import MLP


class Mode(enum.Enum):
    SCALE = "scale"
    ZERO = "zero"


class Settings:
    """A plain Python object with attributes (no description by value: never shared)."""

    def __init__(self, scale: float):
        self.scale = scale


def _scaled_by(scale: float):
    def scaled(x):
        return x * scale

    return scaled


def constant(kind: str, scale: float):
    """The constant of `kind` that makes a network scale its logits by `scale` (0 or not; of
    a dtype, 0 is float16, which rounds the logits)."""
    return {
        "numpy_scalar": lambda: np.float32(scale),
        "numpy_array": lambda: np.full((1,), scale, np.float32),
        "numpy_tuple": lambda: (np.float32(1.0), np.float32(scale)),
        "dtype": lambda: ms.float32 if scale else ms.float16,
        "enum": lambda: Mode.SCALE if scale else Mode.ZERO,
        "function": lambda: _scaled_by(scale),
        "object": lambda: Settings(scale),
    }[kind]()


KINDS = ("numpy_scalar", "numpy_array", "numpy_tuple", "dtype", "enum", "function", "object")


class Scaled(nn.Cell):
    """`x * scale`, with the scale held as a constant of `kind`."""

    def __init__(self, kind: str, scale: float):
        super().__init__()
        self.kind = kind
        self.held = constant(kind, scale)
        self.cast = ops.Cast()

    def construct(self, x):
        if self.kind == "numpy_scalar":
            return x * self.held
        if self.kind == "numpy_array":
            return x * ms.Tensor(self.held)
        if self.kind == "numpy_tuple":
            return x * self.held[0] * self.held[1]
        if self.kind == "dtype":  # float16 rounds what float32 keeps
            return self.cast(self.cast(x / 3, self.held), ms.float32)
        if self.kind == "enum":
            if self.held == Mode.ZERO:
                return x * 0.0
            return x
        if self.kind == "function":
            return self.held(x)
        return x * self.held.scale


class ScaledMLP(MLP):
    """sporeflow's MLP with its logits scaled by a constant of `kind` (the issue's user network)."""

    def __init__(self, scale: float = 1.0, kind: str = "numpy_scalar", **kwargs):
        super().__init__(**kwargs)
        self.scaled = Scaled(kind, scale)

    def construct(self, x):
        return self.scaled(super().construct(x))
