"""Checks a parallel plan before any process starts: operator shard strategies against the
layer shapes and the device count (on any machine, naming the layer), and modes the device
target cannot run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig

from sporeflow.config.facts import worker_batch_size
from sporeflow.config.schema import DeviceTarget, ParallelMode
from sporeflow.core.errors import ConfigError


def _matmul_cells(network) -> dict:
    """Cells with a `matmul` op and a 2-D `weight` (in, out), by their path in the network."""
    return {
        name: cell
        for name, cell in network.cells_and_names()
        if name
        and hasattr(cell, "matmul")
        and hasattr(cell, "weight")
        and len(cell.weight.shape) == 2
    }


def check_strategy(layer: str, strategy, weight_shape, batch_size: int, device_num: int) -> None:
    """A MatMul strategy ((a, b), (c, d)) for x (batch, in) @ W (in, out)."""
    try:
        (a, b), (c, d) = strategy
        a, b, c, d = (int(v) for v in (a, b, c, d))
    except (TypeError, ValueError) as ex:
        raise ConfigError(
            f"parallel.shard.{layer}={strategy}: a MatMul strategy is [[a, b], [c, d]]"
        ) from ex
    where = f"parallel.shard.{layer}=[[{a}, {b}], [{c}, {d}]]"
    if min(a, b, c, d) < 1:
        raise ConfigError(f"{where}: every split must be >= 1")
    if b != c:
        raise ConfigError(
            f"{where}: the reduction dimension is split {b} ways in the input but {c} ways in "
            "the weight; they must agree"
        )
    for name, parts in (("input", a * b), ("weight", c * d)):
        if parts > device_num or device_num % parts:
            raise ConfigError(
                f"{where}: the {name} is split into {parts} slices, which must divide "
                f"parallel.device_num={device_num}"
            )
    n_in, n_out = weight_shape
    for dim, size, split in (
        ("batch per worker (dataset.batch_size)", batch_size, a),
        ("input features", n_in, b),
        ("output features", n_out, d),
    ):
        if size % split:
            raise ConfigError(f"{where}: layer {layer} has {dim} {size}, not divisible by {split}")


def check_parallel_plan(cfg: DictConfig, build_network) -> None:
    """Strategies first (so a bad one is caught on any machine), then what the device can run."""
    par = cfg.parallel
    mode = par.mode
    if par.shard and mode is ParallelMode.semi_auto:  # strategies mean nothing to the other modes
        network = build_network()
        cells = _matmul_cells(network)
        for layer, strategy in par.shard.items():
            if layer not in cells:
                raise ConfigError(
                    f"parallel.shard.{layer}: {type(network).__name__} has no such MatMul layer; "
                    f"shardable layers: {', '.join(cells) or 'none'}"
                )
            check_strategy(
                layer,
                strategy,
                tuple(cells[layer].weight.shape),
                worker_batch_size(cfg),
                par.device_num,
            )
    if (
        mode in (ParallelMode.semi_auto, ParallelMode.auto)
        and cfg.device_target is DeviceTarget.CPU
    ):
        name = {ParallelMode.semi_auto: "SEMI_AUTO_PARALLEL", ParallelMode.auto: "AUTO_PARALLEL"}[
            mode
        ]
        raise ConfigError(
            f"parallel.mode={mode.value} ({name}) cannot run with device_target=CPU: MindSpore's CPU backend "
            "refuses it at graph compile ('currently only support Ascend/GPU backend'). On this machine "
            "use data parallel (parallel=data2|data4|data8), or run with device_target=Ascend|GPU where "
            "those devices exist"
        )


def apply_strategies(network, shard: Mapping[str, Any]) -> None:
    """Set each listed layer's MatMul strategy (SEMI_AUTO_PARALLEL)."""
    cells = _matmul_cells(network)
    for layer, strategy in shard.items():
        cells[layer].matmul.shard(tuple(tuple(int(v) for v in part) for part in strategy))
