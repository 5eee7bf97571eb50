"""Compiled graphs kept for the process, so that a graph is compiled once.

MindSpore keys its in-process graph cache by cell object: every stage builds new cells and a new
`Model`, so stage 1, the baselines and every sweep job run by Hydra's basic launcher (one
process) compiled the same train and eval graphs again. Here a stage's freshly built parts are
described by everything MindSpore folds into a graph - each cell's class, its constants (scalars,
strings, Tensor values), its primitives' attributes, its parameters' names, shapes and dtypes -
and by the process's execution and parallel context. When an earlier stage built the same
description, its parts (and their compiled graphs) are used again, with every parameter of the
fresh parts copied in: weights, BatchNorm statistics, optimizer moments and step, EMA shadows,
loss scale, stage-2 state and the hyperparameters that are graph inputs (learning rate,
momentum, stage-2 settings). A job's results therefore do not depend on what ran before it in
the process (tests/unit/test_graph_pool.py runs two jobs in both orders).

Not pooled: networks with random operators (Dropout and the like keep a random state inside the
compiled kernel that a copy of parameters cannot reset), and anything when
`runtime.reuse_graphs=false`.
"""

from __future__ import annotations

import hashlib
import inspect
import re
from collections import OrderedDict
from enum import Enum
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Model, Parameter, Tensor, nn
from mindspore.ops import Primitive

from sporeflow.engine.loop import StageParts
from sporeflow.storage.checkpoints import overwrite

KEPT = 4  # graphs of this many distinct parts stay compiled (each holds its network's memory)
_POOL: OrderedDict[str, StageParts] = OrderedDict()

# a Cell's per-instance bookkeeping (differs between two builds of one graph), and an optimizer's
# record of its arguments (mindspore.nn.optim.optimizer.opt_init_args_register): no graph reads them
_NOT_COMPILED = frozenset(
    {
        "_create_time",
        "_id",
        "_compile_cache",
        "_phase_cache",
        "arguments_key",
        "_compiled",
        "_jit_graph_name",
        "_cells",
        "_exist_objs",
        "_exist_names",
        "init_args",
        "init_params",
        "init_learning_rate",
        "cell_init_args",
    }
)
_MODEL_SETTINGS = (
    "_amp_level",
    "_boost_level",
    "_keep_bn_fp32",
    "_eval_indexes",
    "_loss_scale_manager",
    "_parallel_mode",
    "_device_number",
    "_backbone_is_train",
)
_RANDOM_ATTRS = frozenset({"seed", "seed0", "seed1", "seed2"})
_RANDOM_CALLS = re.compile(r"dropout|random|uniform|normal|bernoulli|multinomial|shuffle", re.I)
_PARALLEL_KEYS = ("parallel_mode", "device_num", "gradients_mean", "full_batch", "global_rank")


class RandomGraph(Exception):
    """The parts hold a random operator: their graph keeps a state no copy can reset."""


def reused(parts: StageParts, enabled: bool = True) -> StageParts:
    """The parts to train and evaluate with: an earlier stage's of the same graph, the fresh
    ones' values copied into it, or the fresh parts themselves (then kept for later stages)."""
    if not enabled:
        return parts
    try:
        key = graph_key(parts.model)
    except RandomGraph:
        return parts
    pooled = _POOL.get(key)
    if pooled is None:
        _POOL[key] = parts
        while len(_POOL) > KEPT:
            _POOL.popitem(last=False)
        return parts
    _POOL.move_to_end(key)
    copy_values(parts, pooled)
    return pooled


def forget_all() -> None:
    """Drop every kept graph (tests; a process that wants its memory back)."""
    _POOL.clear()


def kept() -> int:
    return len(_POOL)


def _top_cells(model: Model) -> list[nn.Cell]:
    cells, seen = [], set()
    for name in ("_network", "_train_network", "_eval_network", "_predict_network"):
        cell = getattr(model, name, None)
        if isinstance(cell, nn.Cell) and id(cell) not in seen:
            seen.add(id(cell))
            cells.append(cell)
    return cells


def parameters(parts: StageParts) -> dict[str, Parameter]:
    """Every parameter the parts' graphs read, by name (MindSpore's names are unique in a graph)."""
    found: dict[str, Parameter] = {}
    for cell in (*_top_cells(parts.model), *parts.state_cells):
        for param in cell.get_parameters():
            found.setdefault(param.name, param)
    return found


def copy_values(fresh: StageParts, pooled: StageParts) -> None:
    """Every parameter value of `fresh` into the same-named parameter of `pooled`."""
    source, target = parameters(fresh), parameters(pooled)
    if source.keys() != target.keys():  # the key covers names: only a defect gets here
        raise RuntimeError("graph_pool: parts of one graph key hold different parameters")
    for name, param in source.items():
        overwrite(target[name], Tensor(param.init_data().asnumpy()))


def graph_key(model: Model) -> str:
    """A digest of what MindSpore compiles from `model`'s networks, and of the context it
    compiles in; raises RandomGraph for parts with a random operator."""
    digest = hashlib.blake2b(digest_size=20)
    context = [ms.get_context("mode"), ms.get_context("device_target")]
    context += [str(ms.get_auto_parallel_context(key)) for key in _PARALLEL_KEYS]
    digest.update(repr(context).encode())
    digest.update(repr(_describe(_model_settings(model))).encode())
    for top in _top_cells(model):
        for name, cell in top.cells_and_names():
            _refuse_random(cell)
            digest.update(f"{name}|{type(cell).__module__}.{type(cell).__qualname__}".encode())
            digest.update(repr(_cell_constants(cell)).encode())
    return digest.hexdigest()


def _model_settings(model: Model) -> dict:
    """The Model's own settings that shape the networks it builds (its other attributes are
    per-instance bookkeeping)."""
    return {k: getattr(model, k, None) for k in _MODEL_SETTINGS}


def _cell_constants(cell: nn.Cell) -> list:
    """(attribute, description) of everything a cell holds but its child cells."""
    return [
        (attr, _describe(value))
        for attr, value in sorted(vars(cell).items())
        if attr not in _NOT_COMPILED
    ]


def _describe(value: Any, depth: int = 0) -> Any:
    """What of `value` a graph can depend on: a Tensor constant by a digest of its bytes, a
    parameter by name, shape, dtype and whether it is trained."""
    if isinstance(value, Parameter):
        return ("param", value.name, tuple(value.shape), str(value.dtype), value.requires_grad)
    if isinstance(value, Tensor):
        data = np.ascontiguousarray(value.asnumpy())
        fingerprint = hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()
        return ("tensor", data.shape, str(data.dtype), fingerprint)
    if value is None or isinstance(value, (bool, int, float, str, Enum)):
        return repr(value)
    if isinstance(value, Primitive):
        return ("primitive", type(value).__qualname__, _describe(dict(value.attrs), depth))
    if isinstance(value, nn.Cell):
        return ("cell", type(value).__qualname__)  # walked in its own right
    if isinstance(value, (tuple, list)) and depth < 4:
        return tuple(_describe(item, depth + 1) for item in value)
    if isinstance(value, dict) and depth < 4:
        return tuple(
            (str(k), _describe(v, depth + 1))
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        )
    kind = type(value)
    return ("object", kind.__module__, kind.__qualname__, getattr(value, "__qualname__", None))


def _refuse_random(cell: nn.Cell) -> None:
    """RandomGraph for a cell that holds or calls a random operator (checked by its primitives'
    seeds, and by the names its `construct` calls)."""
    primitives = [v for v in vars(cell).values() if isinstance(v, Primitive)]
    primitives += list(getattr(cell, "_primitives", {}).values())
    for primitive in primitives:
        if primitive is not None and _RANDOM_ATTRS & {k.lower() for k in primitive.attrs}:
            raise RandomGraph(type(cell).__qualname__)
    if _calls_random(type(cell)):
        raise RandomGraph(type(cell).__qualname__)


_SOURCES: dict[type[nn.Cell], bool] = {}


def _calls_random(kind: type[nn.Cell]) -> bool:
    """Whether a cell class's `construct` names a random operation (read once per class)."""
    if kind not in _SOURCES:
        try:
            source = inspect.getsource(kind.construct)
        except (OSError, TypeError):
            source = ""
        _SOURCES[kind] = bool(_RANDOM_CALLS.search(source)) or "Dropout" in kind.__name__
    return _SOURCES[kind]
