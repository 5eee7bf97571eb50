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
the process (tests/unit/test_graph_pool.py: a job alone and after another, bit for bit). One
network object serves every stage of a network config, so its eval and export graphs, which
MindSpore compiles per network object, are compiled once too.

Not pooled: networks with random operators (Dropout and the like keep a random state inside the
compiled kernel that a copy of parameters cannot reset), cells that keep parameters outside
MindSpore's cell tree (a layer in a tuple attribute), and anything when
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
_NETWORKS: OrderedDict[str, nn.Cell] = OrderedDict()  # one network object per description
_EVAL_CELLS: OrderedDict[str, nn.Cell] = OrderedDict()  # per network object and loss
# the key each kept network and eval cell was described by when it was fresh: once run, a cell
# carries MindSpore's bookkeeping of its runs (phase, scope, parse method), which is no graph's
_SHARED_KEYS: dict[int, str] = {}

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
        "_compile_phase",  # what MindSpore records when it compiles or runs a cell
        "compile_phase",
        "current_phase",
        "__parse_method__",
        "_scope",
        "_func_graph_flags",
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


class Unshared(Exception):
    """Parts whose graph a copy of parameter values cannot reset: a random operator keeps a
    state in its kernel; a cell held outside MindSpore's cell tree (in a tuple attribute)
    has parameters no walk of the tree finds."""


def shared_network(network: nn.Cell, enabled: bool = True) -> nn.Cell:
    """The process's network object of `network`'s description, `network`'s values copied in
    (or `network` itself, kept for later stages). Train cells of different graphs (stage 1,
    stage 2, an arm with another LR schedule) built around it share its evaluation and export
    graphs, which MindSpore compiles per network object."""
    if not enabled:
        return network
    try:
        key = _cells_key([network])
    except Unshared:
        return network
    kept = _kept(_NETWORKS, key, network)
    _SHARED_KEYS[id(kept)] = key
    if kept is not network:
        _copy(_named(network.get_parameters()), _named(kept.get_parameters()))
    return kept


def eval_cell(network: nn.Cell, loss_fn: nn.Cell, enabled: bool = True) -> nn.Cell:
    """`nn.WithEvalCell(network, loss_fn)`, one per network object and loss: every stage that
    evaluates a shared network runs one compiled eval graph."""
    fresh = nn.WithEvalCell(network, loss_fn)
    if not enabled:
        return fresh
    try:
        key = f"{id(network)}|{_cells_key([fresh])}"  # the cell holds the network: ids stay unique
    except Unshared:
        return fresh
    kept = _kept(_EVAL_CELLS, key, fresh)
    _SHARED_KEYS[id(kept)] = key
    return kept


def _kept(pool: OrderedDict, key: str, fresh):
    """`pool[key]`, made the most recent; or `fresh`, kept under `key` (the oldest dropped)."""
    if key in pool:
        pool.move_to_end(key)
        return pool[key]
    pool[key] = fresh
    while len(pool) > KEPT:
        _SHARED_KEYS.pop(id(pool.popitem(last=False)[1]), None)
    return fresh


def reused(parts: StageParts, enabled: bool = True) -> StageParts:
    """The parts to train and evaluate with: an earlier stage's of the same graph, the fresh
    ones' values copied into it, or the fresh parts themselves (then kept for later stages)."""
    if not enabled:
        return parts
    try:
        key = graph_key(parts.model)
    except Unshared:
        return parts
    pooled = _kept(_POOL, key, parts)
    if pooled is not parts:
        copy_values(parts, pooled)
    return pooled


def forget_all() -> None:
    """Drop every kept graph (tests; a process that wants its memory back)."""
    for pool in (_POOL, _NETWORKS, _EVAL_CELLS, _SHARED_KEYS):
        pool.clear()


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


def _named(params) -> dict[str, Parameter]:
    found: dict[str, Parameter] = {}
    for param in params:
        found.setdefault(param.name, param)  # MindSpore's names are unique in a graph
    return found


def parameters(parts: StageParts) -> dict[str, Parameter]:
    """Every parameter the parts' graphs read, by name."""
    cells = (*_top_cells(parts.model), *parts.state_cells)
    return _named(param for cell in cells for param in cell.get_parameters())


def copy_values(fresh: StageParts, pooled: StageParts) -> None:
    """Every parameter value of `fresh` into the same-named parameter of `pooled`."""
    _copy(parameters(fresh), parameters(pooled))


def _copy(source: dict[str, Parameter], target: dict[str, Parameter]) -> None:
    if source.keys() != target.keys():  # the key covers names: only a defect gets here
        raise RuntimeError("graph_pool: parts of one graph key hold different parameters")
    for name, param in source.items():
        if param is not target[name]:  # a shared network's own parameters are already there
            overwrite(target[name], Tensor(param.init_data().asnumpy()))


def graph_key(model: Model) -> str:
    """A digest of what MindSpore compiles from `model`'s networks, and of the context it
    compiles in; raises Unshared for parts with a random operator."""
    digest = hashlib.blake2b(digest_size=20)
    digest.update(context_key().encode())
    digest.update(repr(describe(_model_settings(model))).encode())
    digest.update(_cells_key(_top_cells(model)).encode())
    return digest.hexdigest()


def context_key() -> str:
    """The execution and parallel context a graph is compiled in."""
    context = [ms.get_context("mode"), ms.get_context("device_target")]
    context += [str(ms.get_auto_parallel_context(key)) for key in _PARALLEL_KEYS]
    return repr(context)


def cell_key(cell: nn.Cell) -> str:
    """A digest of what MindSpore compiles from `cell`, walked in full (no kept cell enters by
    the key of its process): the same in every process that builds the same cell; raises
    Unshared for a random operator."""
    return _cells_key([cell], shortcut=False)


def _cells_key(tops: list[nn.Cell], shortcut: bool = True) -> str:
    """A digest of the cells under `tops` (Unshared for a random operator among them); with
    `shortcut`, a kept network or eval cell enters by the key it was kept under."""
    digest = hashlib.blake2b(digest_size=20)
    tree = frozenset(id(cell) for top in tops for _, cell in top.cells_and_names())
    for top in tops:
        _walk(top, "", digest, tree, shortcut)
    return digest.hexdigest()


def _walk(cell: nn.Cell, name: str, digest, tree: frozenset[int], shortcut: bool) -> None:
    if shortcut and id(cell) in _SHARED_KEYS:
        digest.update(f"{name}|kept|{_SHARED_KEYS[id(cell)]}".encode())
        return
    _refuse_random(cell)
    digest.update(f"{name}|{type(cell).__module__}.{type(cell).__qualname__}".encode())
    digest.update(repr(_cell_constants(cell, tree)).encode())
    for child_name, child in cell.name_cells().items():
        _walk(child, f"{name}.{child_name}", digest, tree, shortcut)


def _model_settings(model: Model) -> dict:
    """The Model's own settings that shape the networks it builds (its other attributes are
    per-instance bookkeeping)."""
    return {k: getattr(model, k, None) for k in _MODEL_SETTINGS}


def _cell_constants(cell: nn.Cell, tree: frozenset[int]) -> list:
    """(attribute, description) of everything a cell holds but its child cells."""
    return [
        (attr, describe(value, tree))
        for attr, value in sorted(vars(cell).items())
        if attr not in _NOT_COMPILED and not (attr.startswith("_lazy_") and not value)
    ]


def describe(value: Any, tree: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """What of `value` a graph can depend on: a Tensor constant by a digest of its bytes, a
    parameter by name, shape, dtype and whether it is trained; a cell of `tree` (the cells
    being walked) by its class, any other cell in full."""
    if isinstance(value, Parameter):
        return ("param", value.name, tuple(value.shape), str(value.dtype), value.requires_grad)
    if isinstance(value, Tensor):
        data = np.ascontiguousarray(value.asnumpy())
        fingerprint = hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()
        return ("tensor", data.shape, str(data.dtype), fingerprint)
    if value is None or isinstance(value, (bool, int, float, str, Enum)):
        return repr(value)
    if isinstance(value, Primitive):
        return ("primitive", type(value).__qualname__, describe(dict(value.attrs)))
    if isinstance(value, nn.Cell):
        return _held_cell(value, tree)
    if isinstance(value, (tuple, list)) and depth < 4:
        return tuple(describe(item, tree, depth + 1) for item in value)
    if isinstance(value, dict) and depth < 4:
        return tuple(
            (str(k), describe(v, tree, depth + 1))
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
        )
    kind = type(value)
    return ("object", kind.__module__, kind.__qualname__, getattr(value, "__qualname__", None))


def _held_cell(cell: nn.Cell, tree: frozenset[int]) -> tuple:
    """A cell an attribute holds: one of the tree (nn.SequentialCell keeps its cells in a list
    too) is walked in its own right; one outside it (a tuple attribute) is described in full,
    or Unshared when it holds parameters, which no walk of the tree finds and no copy reaches."""
    if id(cell) in tree:
        return ("cell", type(cell).__qualname__)
    if list(cell.get_parameters()):
        raise Unshared(f"{type(cell).__qualname__} holds parameters outside the cell tree")
    return ("cell", _cells_key([cell]))


def _refuse_random(cell: nn.Cell) -> None:
    """Unshared for a cell that holds or calls a random operator (checked by its primitives'
    seeds, and by the names its `construct` calls)."""
    primitives = [v for v in vars(cell).values() if isinstance(v, Primitive)]
    primitives += list(getattr(cell, "_primitives", {}).values())
    for primitive in primitives:
        if primitive is not None and _RANDOM_ATTRS & {k.lower() for k in primitive.attrs}:
            raise Unshared(type(cell).__qualname__)
    if _calls_random(type(cell)):
        raise Unshared(type(cell).__qualname__)


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
