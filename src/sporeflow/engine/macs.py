"""A network's forward multiply-accumulates per image, for the cost rule (engine.cost).

MindSpore has no FLOP counter, so this counts the layers that hold the arithmetic: every cell
with a weight of two or more dimensions (Dense, Conv1d/2d/3d, the MLP's MatMul layers) does,
for each output position, one multiply-accumulate per weight feeding an output channel:
    MACs = weight elements x output positions,
output positions being the output's elements per image over its channels (its second
dimension): 1 for a Dense layer (MACs = in x out), H_out x W_out for a Conv2d (MACs = H_out
W_out C_out C_in/groups k_h k_w). Biases, normalisation, activations and pooling are left out,
as MAC counts usually do. The output shapes come from one forward pass of a zero image in
PyNative mode (shapes only; the mode is put back after), so they follow the network's own
strides and padding. A network that cannot run so is counted as one MAC per weight (each
weight used once: exact for Dense layers, a lower bound for convolutions), with a warning.
"""

from __future__ import annotations

import logging
import math

from sporeflow.engine.shapes import zero_forward

log = logging.getLogger(__name__)


def weight_count(network) -> int:
    """Trainable parameters P (every element)."""
    return sum(math.prod(p.shape) if p.shape else 1 for p in network.trainable_params())


def _weight_of(cell):
    weights = [p for p in cell.get_parameters(expand=False) if len(p.shape) >= 2]
    return weights[0] if len(weights) == 1 else None


def forward_macs(network, image_shape: tuple[int, ...]) -> int:
    """Multiply-accumulates of one forward pass over one image of `image_shape` (C, H, W)."""
    counted: list[int] = []

    def hook(cell, _inputs, output):
        weight = _weight_of(cell)
        shape = tuple(output.shape)
        if weight is None or len(shape) < 2:
            return
        positions = math.prod(shape[2:])  # per image: a Dense output (1, out) has one
        counted.append(math.prod(weight.shape) * positions)

    handles = [
        cell.register_forward_hook(hook)
        for _, cell in network.cells_and_names()
        if _weight_of(cell) is not None
    ]
    try:
        zero_forward(network, image_shape)
    except Exception as ex:  # noqa: BLE001 - any failure falls back to the documented bound
        log.warning(
            "forward MACs: the network did not run on a %s image (%s): counted as one "
            "multiply-accumulate per weight",
            image_shape,
            ex,
        )
        return weight_count(network)
    finally:
        for handle in handles:
            handle.remove()
    return sum(counted) if counted else weight_count(network)
