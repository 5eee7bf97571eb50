"""Compiled graphs kept for the process, so that a graph is compiled once.

MindSpore keys its in-process graph cache by cell object: every stage builds new cells and a new
`Model`, so stage 1, the baselines and every sweep job run by Hydra's basic launcher (one
process) compiled the same train and eval graphs again. Here a stage's freshly built parts are
described by everything MindSpore folds into a graph - each cell's class, its primitives'
attributes, its parameters' names, shapes and dtypes, and every other value it holds - and by
the process's execution and parallel context. A value enters by value, never by its type alone
(`describe`): a Tensor or numpy constant by dtype, shape and a digest of its bytes, a dtype or
enum member by name, a function by its code and what it reads (defaults, closure, the globals
it names), MindSpore's graph-building objects by their attributes. A value that cannot be
described so (an object of a class this module does not know) leaves the parts unshared:
compiled afresh, said at debug level, rather than taken for another value of its type (a user
network's `np.float32(0)` ran the graph of `np.float32(1)`). When an earlier stage built the same
description, its parts (and their compiled graphs) are used again, with every parameter of the
fresh parts copied in: weights, BatchNorm statistics, optimizer moments and step, EMA shadows,
loss scale, stage-2 state and the hyperparameters that are graph inputs (learning rate,
momentum, stage-2 settings). A job's results therefore do not depend on what ran before it in
the process (tests/unit/test_graph_pool.py: a job alone and after another, bit for bit). One
network object serves every stage of a network config, so its eval and export graphs, which
MindSpore compiles per network object, are compiled once too.

Not pooled: networks with random operators (Dropout and the like keep a random state inside the
compiled kernel that a copy of parameters cannot reset), cells that keep parameters outside
MindSpore's cell tree (a layer in a tuple attribute), cells holding a value with no description
by value, and anything when `runtime.reuse_graphs=false`. engine.compile_cache looks graphs up
on disk by the same description (`cell_key`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import logging
import re
import threading
import types
from collections import OrderedDict
from enum import Enum
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import Model, Parameter, Tensor, nn
from mindspore._c_expression import MetaFuncGraph_, MixedPrecisionType
from mindspore.common import dtype as mstype
from mindspore.common.initializer import Initializer
from mindspore.graph.jit_config import JitConfig
from mindspore.ops import Primitive
from mindspore.train.loss_scale_manager import LossScaleManager

from sporeflow.engine.loop import StageParts
from sporeflow.storage.checkpoints import overwrite

log = logging.getLogger(__name__)
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
        "_cell_init_args",  # MindSpore 2.10's name: the arguments' repr, addresses and all
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
    """Parts whose graph is compiled afresh: a value they hold cannot be described by value (two
    graphs would look alike), or a copy of parameter values cannot reset their graph (a random
    operator keeps a state in its kernel; a cell held outside MindSpore's cell tree, in a tuple
    attribute, has parameters no walk of the tree finds)."""


def _key_or_none(describer, *args) -> str | None:
    """`describer(*args)`, or None (said at debug level) for parts that are not shared."""
    try:
        return describer(*args)
    except Unshared as ex:
        log.debug("graph_pool: not shared, compiled afresh: %s", ex)
        return None


def shared_network(network: nn.Cell, enabled: bool = True) -> nn.Cell:
    """The process's network object of `network`'s description, `network`'s values copied in
    (or `network` itself, kept for later stages). Train cells of different graphs (stage 1,
    stage 2, an arm with another LR schedule) built around it share its evaluation and export
    graphs, which MindSpore compiles per network object."""
    key = _key_or_none(_cells_key, [network]) if enabled else None
    if key is None:
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
    cells = _key_or_none(_cells_key, [fresh]) if enabled else None
    if cells is None:
        return fresh
    key = f"{id(network)}|{cells}"  # the cell holds the network: ids stay unique
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
    key = _key_or_none(graph_key, parts.model) if enabled else None
    if key is None:
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
    _refuse_random(cell, name)
    digest.update(f"{name}|{type(cell).__module__}.{type(cell).__qualname__}".encode())
    digest.update(repr(_cell_constants(cell, name, tree)).encode())
    for child_name, child in cell.name_cells().items():
        _walk(child, f"{name}.{child_name}", digest, tree, shortcut)


def _model_settings(model: Model) -> dict:
    """The Model's own settings that shape the networks it builds (its other attributes are
    per-instance bookkeeping)."""
    return {k: getattr(model, k, None) for k in _MODEL_SETTINGS}


def _cell_constants(cell: nn.Cell, name: str, tree: frozenset[int]) -> list:
    """(attribute, description) of everything a cell holds but its child cells; Unshared names
    the attribute whose value cannot be described."""
    described = []
    for attr, value in sorted(vars(cell).items()):
        if attr in _NOT_COMPILED or (attr.startswith("_lazy_") and not value):
            continue
        try:
            described.append((attr, describe(value, tree)))
        except Unshared as ex:
            where = f"{name.lstrip('.') or 'the network'}.{attr}"
            raise Unshared(f"{where} ({type(cell).__qualname__}) holds {ex}") from None
    return described


def describe(value: Any, tree: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """What of `value` a graph can depend on, by value: a Tensor or numpy constant by its dtype,
    shape and a digest of its bytes, a parameter by name, shape, dtype and whether it is
    trained, a cell of `tree` (the cells being walked) by its class, any other cell in full, a
    function by its code and every value it reads. Raises Unshared for a value it cannot
    describe so (an object of a class it does not know): two such values would look alike."""
    if depth > MAX_DEPTH:
        raise Unshared(f"a value nested deeper than {MAX_DEPTH} levels")
    if type(value) in _PLAIN:
        return repr(value)
    for kinds, describer in _DESCRIBERS:
        if isinstance(value, kinds):
            return describer(value, tree, depth + 1)
    raise Unshared(f"a {_qualified(type(value))} (a class whose values cannot be described)")


MAX_DEPTH = 12  # nesting of containers and functions a description follows
_PLAIN = frozenset({type(None), bool, int, float, complex, str, bytes, range, type(...)})


def _qualified(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _parameter(value: Parameter, tree, depth) -> tuple:
    return ("param", value.name, tuple(value.shape), str(value.dtype), value.requires_grad)


def _tensor(value: Tensor, tree, depth) -> tuple:
    return ("tensor", *_array(value.asnumpy()))


def _numpy(value: np.ndarray | np.generic, tree, depth) -> tuple:
    return ("numpy", *_array(np.asarray(value)))


def _array(data: np.ndarray) -> tuple:
    """dtype, shape and a digest of the bytes (Unshared for an array of Python objects)."""
    if data.dtype.hasobject:  # its bytes are addresses
        raise Unshared(f"a numpy array of dtype {data.dtype}")
    data = np.ascontiguousarray(data)
    return (
        data.shape,
        str(data.dtype),
        hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest(),
    )


def _enum(value: Enum, tree, depth) -> tuple:
    return ("enum", _qualified(type(value)), value.name, describe(value.value, tree, depth))


def _member(value: Any, tree, depth) -> tuple:
    """A member of one of MindSpore's enumerations (a cell's mixed-precision type)."""
    return ("enum", _qualified(type(value)), value.name)


def _dtype(value: Any, tree, depth) -> tuple:
    return ("dtype", str(value))


def _primitive(value: Primitive, tree, depth) -> tuple:
    return ("primitive", _qualified(type(value)), describe(dict(value.attrs), tree, depth))


def _sequence(value: tuple | list, tree, depth) -> tuple:
    return (_qualified(type(value)), *(describe(item, tree, depth) for item in value))


def _mapping(value: dict, tree, depth) -> tuple:
    items = [(describe(k, tree, depth), describe(v, tree, depth)) for k, v in value.items()]
    return (_qualified(type(value)), *sorted(items, key=repr))


def _set(value: set | frozenset, tree, depth) -> tuple:
    return (_qualified(type(value)), *sorted((describe(v, tree, depth) for v in value), key=repr))


def _slice(value: slice, tree, depth) -> tuple:
    return ("slice", *(describe(v, tree, depth) for v in (value.start, value.stop, value.step)))


def _by_attributes(value: Any, tree, depth) -> tuple:
    """MindSpore's graph-building objects (GradOperation, HyperMap, a MultitypeFuncGraph and its
    registered functions, an initializer, a loss scale manager, a jit config): what they do is
    their class's and their attributes'."""
    return ("attrs", _qualified(type(value)), describe(vars(value), tree, depth))


def _module(value: types.ModuleType, tree, depth) -> tuple:
    return ("module", value.__name__)


def _class(value: type, tree, depth) -> tuple:
    """A class by name and the digest of its source (a built-in one by name)."""
    try:
        source = inspect.getsource(value)
    except TypeError:  # a class of the interpreter's or of a compiled extension
        return ("class", _qualified(value))
    except OSError as ex:
        raise Unshared(f"class {_qualified(value)} without source ({ex})") from None
    return (
        "class",
        _qualified(value),
        hashlib.blake2b(source.encode(), digest_size=16).hexdigest(),
    )


_FUNCTIONS = threading.local()  # the functions being described in this thread (recursion)


def _function(value: types.FunctionType, tree, depth) -> tuple:
    """A Python function by its code and every value it reads: defaults, closure, and the
    module globals its code names (a function calling itself is named, not followed again). A
    library's function (MindSpore's, numpy's) reads its library's module state, not followed:
    the context key and, across processes, the cache's version folder cover MindSpore's."""
    stack = _FUNCTIONS.__dict__.setdefault("stack", set())
    name = ("function", value.__module__, value.__qualname__, _code_digest(value.__code__))
    if id(value) in stack:
        return name
    if any(_RANDOM_CALLS.search(n) for n in (value.__name__, *_names(value.__code__))):
        raise Unshared(f"function {value.__qualname__}, which calls a random operation")
    stack.add(id(value))
    try:
        closure = _closure(value)
        library = str(value.__module__).partition(".")[0] in _LIBRARIES
        names = [] if library else sorted(_names(value.__code__) & value.__globals__.keys())
        read = {n: value.__globals__[n] for n in names}
        reads = (value.__defaults__, value.__kwdefaults__, closure, read)
        return (*name, describe(reads, tree, depth))
    finally:
        stack.discard(id(value))


_LIBRARIES = frozenset({"mindspore", "numpy"})


def _closure(value: types.FunctionType) -> dict[str, Any]:
    """A function's closure variables by name; of MindSpore's `jit` wrapper (what
    `ops.value_and_grad` of a cell returns in graph mode) but `hash_obj`, the time it was made
    at, which keys MindSpore's own cache and nothing in the graph."""
    cells = zip(value.__code__.co_freevars, value.__closure__ or (), strict=True)
    try:
        closure = {n: cell.cell_contents for n, cell in cells}
    except ValueError:  # a closure variable not yet assigned
        raise Unshared(f"function {value.__qualname__} with an unassigned closure") from None
    if getattr(value, "__wrapped_by_jit__", False):
        closure.pop("hash_obj", None)
    return closure


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names `code` and the functions defined in it use."""
    found = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found |= _names(const)
    return found


def _code_digest(code: types.CodeType) -> str:
    """A digest of what a code object does: its bytecode, names and constants."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(code.co_code)
    counts = (code.co_flags, code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount)
    names = (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)
    digest.update(repr((counts, names)).encode())
    for const in code.co_consts:
        const_key = _code_digest(const) if isinstance(const, types.CodeType) else describe(const)
        digest.update(repr(const_key).encode())
    return digest.hexdigest()


def _builtin(value: types.BuiltinFunctionType, tree, depth) -> tuple:
    """A function of the interpreter or an extension, and what it is bound to (not a module)."""
    bound = getattr(value, "__self__", None)
    owner = None if bound is None or isinstance(bound, types.ModuleType) else bound
    module = getattr(value, "__module__", None) or _qualified(type(bound))
    return ("builtin", module, value.__qualname__, describe(owner, tree, depth))


def _method(value: types.MethodType, tree, depth) -> tuple:
    return ("method", describe(value.__func__, tree, depth), describe(value.__self__, tree, depth))


def _partial(value: functools.partial, tree, depth) -> tuple:
    return (
        "partial",
        *(describe(v, tree, depth) for v in (value.func, value.args, value.keywords)),
    )


def _ufunc(value: np.ufunc, tree, depth) -> tuple:
    return ("ufunc", value.__name__)


def _held_cell(cell: nn.Cell, tree: frozenset[int], depth: int = 0) -> tuple:
    """A cell an attribute holds: one of the tree (nn.SequentialCell keeps its cells in a list
    too) is walked in its own right; one outside it (a tuple attribute) is described in full,
    or Unshared when it holds parameters, which no walk of the tree finds and no copy reaches."""
    if id(cell) in tree:
        return ("cell", type(cell).__qualname__)
    if list(cell.get_parameters()):
        raise Unshared(f"{type(cell).__qualname__} holds parameters outside the cell tree")
    return ("cell", _cells_key([cell]))


# the describer of each kind of value, in order (a Parameter is a Tensor, an IntEnum an int)
_DESCRIBERS: tuple[tuple[Any, Any], ...] = (
    (Parameter, _parameter),
    (Tensor, _tensor),
    ((np.ndarray, np.generic), _numpy),
    (Enum, _enum),
    (mstype.Type, _dtype),
    (MixedPrecisionType, _member),
    (Primitive, _primitive),
    (nn.Cell, _held_cell),
    ((MetaFuncGraph_, Initializer, LossScaleManager, JitConfig), _by_attributes),
    ((tuple, list), _sequence),
    (dict, _mapping),
    ((set, frozenset), _set),
    (slice, _slice),
    (types.FunctionType, _function),
    (types.MethodType, _method),
    (types.BuiltinFunctionType, _builtin),
    (functools.partial, _partial),
    (np.ufunc, _ufunc),
    (types.ModuleType, _module),
    (type, _class),
)


def _refuse_random(cell: nn.Cell, name: str = "") -> None:
    """Unshared for a cell that holds or calls a random operator (checked by its primitives'
    seeds, and by the names its `construct` calls)."""
    primitives = [v for v in vars(cell).values() if isinstance(v, Primitive)]
    primitives += list(getattr(cell, "_primitives", {}).values())
    random = any(
        primitive is not None and _RANDOM_ATTRS & {k.lower() for k in primitive.attrs}
        for primitive in primitives
    )
    if random or _calls_random(type(cell)):
        where = name.lstrip(".") or "the network"
        raise Unshared(f"{where} ({type(cell).__qualname__}) holds or calls a random operator")


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
