"""Typed schemas for the composed config, and the validation that runs before any work.

Two kinds of node (docs/architecture.md, "Config"):
- the framework's own nodes (parallel, boost, callbacks, tracking, runtime and the run-level
  keys) are dataclasses registered in Hydra's ConfigStore: Hydra rejects unknown keys and
  wrong types while composing;
- user-swappable components (model, dataset, optimizer, loss) are `_target_` nodes: their keys
  are checked here against the target's signature, so `optimizer.lrr` fails before training.
"""

from __future__ import annotations

import importlib
import inspect
import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Any, Dict, List, Optional

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sporeflow.config import objective
from sporeflow.core.errors import ConfigError
from sporeflow.nn import schedules

SCHEMA_NAME = "sporeflow_schema"
COMPONENT_GROUPS = ("model", "dataset", "optimizer", "loss")


class Mode(Enum):
    graph = "graph"
    pynative = "pynative"


class DeviceTarget(Enum):
    CPU = "CPU"
    GPU = "GPU"
    Ascend = "Ascend"


class CpuIsa(Enum):
    auto = "auto"
    AVX2 = "AVX2"
    AVX512_CORE = "AVX512_CORE"
    native = "native"


class ParallelMode(Enum):
    standalone = "standalone"
    data = "data"  # DATA_PARALLEL
    semi_auto = "semi_auto"  # SEMI_AUTO_PARALLEL: operator shard strategies from parallel.shard
    auto = "auto"  # AUTO_PARALLEL: strategies searched (parallel.search_mode)


class SearchMode(Enum):
    sharding_propagation = "sharding_propagation"
    recursive_programming = "recursive_programming"
    dynamic_programming = "dynamic_programming"


class AmpLevel(Enum):
    O0 = "O0"
    O1 = "O1"
    O2 = "O2"
    O3 = "O3"


class LossScaleManager(Enum):
    fixed = "fixed"
    dynamic = "dynamic"


class EvalWith(Enum):
    raw = "raw"
    ema = "ema"


class Monitor(Enum):
    max = "max"
    min = "min"


class BoostName(Enum):
    none = "none"
    dim_reduce = "dim_reduce"


class StartFrom(Enum):
    final = "final"  # stage 2 starts from stage 1's final weights (MindSpore's built-in does)
    mean = "mean"  # ... from the mean of the snapshots: the PCA's own centre


class Baseline(Enum):
    baseline = "baseline"  # plain training continued from stage 1, same budget
    annealed = "annealed"  # the same at anneal_factor x LR
    snapshot_mean = "snapshot_mean"  # the mean of the stage-1 snapshots, no training


@dataclass
class RuntimeConfig:
    cpu_isa: CpuIsa = CpuIsa.auto
    threads: int = 0


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None
    experiment_name: str = "sporeflow"
    run_name: Optional[str] = None


@dataclass
class StrategyCkptConfig:
    load_file: str = ""
    save_file: str = ""
    only_trainable_params: bool = True


@dataclass
class ParallelConfig:
    mode: ParallelMode = ParallelMode.standalone
    workers: int = 1  # processes in the whole job (MindSpore's device_num)
    device_num: int = 1  # interpolated from workers in the group files
    gradients_mean: bool = True
    parameter_broadcast: bool = False
    all_reduce_fusion_config: List[int] = field(default_factory=list)
    strategy_ckpt_config: StrategyCkptConfig = field(default_factory=StrategyCkptConfig)
    integrated_save: bool = True
    search_mode: SearchMode = SearchMode.sharding_propagation
    shard: Dict[str, Any] = field(default_factory=dict)  # layer (cell path) -> MatMul strategy
    nodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 0  # 0 = a free port
    cluster_time_out: int = 120  # seconds msrun waits for all workers to join
    per_worker_batch: bool = (
        False  # false: dataset.batch_size is the global batch, split across workers
    )


@dataclass
class SnapshotConfig:
    start_epoch: int = 1  # first stage-1 epoch (1-based) that keeps snapshots
    per_epoch: int = 1  # snapshots per epoch, evenly spaced, the last at epoch end


@dataclass
class BoostConfig:
    name: BoostName = BoostName.none
    n_component: int = 32  # the tutorial's name (the built-in reads `n_components`)
    rho: float = 0.55
    gamma: float = 0.9
    alpha: float = 0.001
    sigma: float = 0.4
    epochs: int = 2  # stage-2 epochs
    start_from: StartFrom = (
        StartFrom.final
    )  # stage 2's first weights: final or mean (of the snapshots)
    weight_decay: float = 0.0  # decoupled decay on the out-of-subspace update
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    pca_mat_path: Optional[str] = None
    pca_chunk_mb: float = 256.0
    baselines: List[Baseline] = field(default_factory=lambda: list(Baseline))
    baseline_epochs: Optional[int] = None  # null = boost.epochs
    anneal_factor: float = 0.1
    stage1_run: Optional[str] = None  # MLflow run id of a finished stage-1 run to reuse
    reuse_stage1: bool = True  # reuse a finished stage 1 with the same fingerprint
    reuse_baselines: bool = True  # reuse finished baselines with the same fingerprint


@dataclass
class CheckpointCallbackConfig:
    every_n_epochs: int = 1
    keep_last: int = 2


@dataclass
class BestCheckpointConfig:
    monitor: str = "acc"  # an eval metric: acc | loss
    mode: Monitor = Monitor.max
    keep: int = 1  # 0 = no best-k checkpoints


@dataclass
class EmaConfig:
    enabled: bool = False
    decay: float = 0.999
    warmup: float = 0.0  # updates; decay * (1 - exp(-updates / warmup)); 0 = off
    eval_with: EvalWith = EvalWith.raw


@dataclass
class TrainStepConfig:
    loss_scale: float = 1.0  # the fixed scale, or the dynamic scale's start
    loss_scale_manager: LossScaleManager = LossScaleManager.fixed
    loss_scale_factor: float = 2.0
    loss_scale_window: int = 1000
    clip_grad_norm: float = 0.0  # 0 = off
    accumulation_steps: int = 1
    ema: EmaConfig = field(default_factory=EmaConfig)
    amp_level: AmpLevel = AmpLevel.O0
    keep_batchnorm_fp32: bool = True


@dataclass
class CallbacksConfig:
    progress_bar: bool = True
    log_every_n_steps: int = 1
    stop_on_divergence: bool = True  # a non-finite loss/weights ends the run FAILED
    eval_every_n_epochs: int = 1
    checkpoint: CheckpointCallbackConfig = field(default_factory=CheckpointCallbackConfig)
    best: BestCheckpointConfig = field(default_factory=BestCheckpointConfig)


@dataclass
class SweepConfig:
    objective: str = "auto"  # what a sweep ranks jobs by and Optuna optimises (objective.py)


@dataclass
class RunConfig:
    model: Dict[str, Any] = field(default_factory=dict)
    dataset: Dict[str, Any] = field(default_factory=dict)
    optimizer: Dict[str, Any] = field(default_factory=dict)
    loss: Dict[str, Any] = field(default_factory=dict)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    boost: BoostConfig = field(default_factory=BoostConfig)
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    train: TrainStepConfig = field(default_factory=TrainStepConfig)
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    sweep: SweepConfig = field(default_factory=SweepConfig)
    epochs: int = 10
    seed: int = 1
    mode: Mode = Mode.graph
    device_target: DeviceTarget = DeviceTarget.CPU
    experiment: Optional[str] = None
    resume: Any = False


def allowed_keys(path: str) -> list[str]:
    """Keys the schema allows at a dotted path ("" = top level, "callbacks.checkpoint");
    empty for component nodes, whose keys depend on their `_target_`."""
    node: Any = RunConfig
    for part in [p for p in path.split(".") if p]:
        types = {f.name: f.type for f in fields(node)} if is_dataclass(node) else {}
        hints = typing.get_type_hints(node) if is_dataclass(node) else {}
        if part not in types:
            return []
        node = hints.get(part)
    return [f.name for f in fields(node)] if is_dataclass(node) else []


# Arguments sporeflow passes itself when it builds a component; a config must not set them.
_SUPPLIED_AT_BUILD = {"optimizer": {"params", "steps_per_epoch", "epochs"}}


def _import_target(path: str, key: str) -> Any:
    module_name, _, attr = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as ex:
        raise ConfigError(f"{key}._target_: cannot import {path!r} ({ex})") from ex


def _signature(node: DictConfig, group: str):
    """The parameters of the node's `_target_` (None for builtins without a signature) and its
    type hints (empty where they cannot be resolved)."""
    target = _import_target(node["_target_"], group)
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return None, {}
    try:
        hints = typing.get_type_hints(target.__init__ if inspect.isclass(target) else target)
    except Exception:  # noqa: BLE001 - unresolvable annotations: types are simply not checked
        hints = {}
    return params, hints


def component_settings(group: str, node: DictConfig) -> list[str] | None:
    """The keys a component node may set (None: the target takes **kwargs, or has no signature)."""
    params, _ = _signature(node, group)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    supplied = _SUPPLIED_AT_BUILD.get(group, set())
    return [
        n
        for n, p in params.items()
        if p.kind is not inspect.Parameter.VAR_POSITIONAL and n not in supplied
    ]


_KINDS = {float: "a number", int: "a whole number", bool: "true or false", str: "a string"}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a config value can stand for an argument annotated `hint` (simple types only)."""
    if typing.get_origin(hint) is typing.Union:
        args = typing.get_args(hint)
        return (value is None and type(None) in args) or any(
            _fits(value, a) for a in args if a is not type(None)
        )
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint in (bool, str):
        return isinstance(value, hint)
    return True


def _kind(hint: Any) -> str:
    args = [a for a in typing.get_args(hint) if a is not type(None)] or [hint]
    return " or ".join(_KINDS.get(a, getattr(a, "__name__", str(a))) for a in args)


def _check_component(group: str, node: DictConfig) -> None:
    """Fail on keys the target does not accept, values of the wrong type, and required
    arguments that are missing."""
    if "_target_" not in node:
        raise ConfigError(
            f"{group}._target_ is missing: name the class or function that builds the {group}"
        )
    params, hints = _signature(node, group)
    if params is None:
        return  # builtins without a signature: nothing to check against
    allowed = component_settings(group, node)
    keys = [k for k in node.keys() if not str(k).startswith("_")]
    for key in keys:
        if allowed is not None and key not in allowed:
            raise ConfigError(
                f"{group}.{key} is not a setting of {node['_target_']}; allowed: {', '.join(allowed)}"
            )
        value = node[key]
        if key in hints and not _fits(value, hints[key]):
            raise ConfigError(
                f"{group}.{key}={value!r}: must be {_kind(hints[key])} "
                f"({node['_target_']} takes {key}: {_kind(hints[key])})"
            )
    if not node.get("_partial_", False):
        supplied = _SUPPLIED_AT_BUILD.get(group, set())
        for name, p in params.items():
            required = p.default is inspect.Parameter.empty and p.kind in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                inspect.Parameter.KEYWORD_ONLY,
            )
            if required and name not in keys and name not in supplied:
                raise ConfigError(f"{group}.{name} is required by {node['_target_']} but not set")


def _check_schedule(node: DictConfig) -> None:
    """optimizer.schedule: a known name and only the keys schedules.learning_rates takes."""
    schedule = node.get("schedule")
    if not schedule:
        return
    name = schedule.get("name", "constant")
    if name not in schedules.NAMES:
        raise ConfigError(
            f"optimizer.schedule.name={name!r}; allowed: {', '.join(schedules.NAMES)}"
        )
    allowed = [
        p
        for p in inspect.signature(schedules.learning_rates).parameters
        if p not in ("lr_max", "steps_per_epoch", "epochs")
    ]
    for key in schedule:
        if key not in allowed:
            raise ConfigError(
                f"optimizer.schedule.{key} is not a schedule setting; allowed: {', '.join(allowed)}"
            )


def _check_ranges(cfg: DictConfig) -> None:
    positive = {
        "epochs": cfg.epochs,
        "dataset.batch_size": cfg.dataset.get("batch_size", 1),
        "callbacks.log_every_n_steps": cfg.callbacks.log_every_n_steps,
        "callbacks.eval_every_n_epochs": cfg.callbacks.eval_every_n_epochs,
        "callbacks.checkpoint.every_n_epochs": cfg.callbacks.checkpoint.every_n_epochs,
        "callbacks.checkpoint.keep_last": cfg.callbacks.checkpoint.keep_last,
        "parallel.workers": cfg.parallel.workers,
    }
    for key, value in positive.items():
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{key}={value!r}: must be a whole number >= 1")
    if cfg.runtime.threads < 0:
        raise ConfigError(
            f"runtime.threads={cfg.runtime.threads}: must be >= 0 (0 = MindSpore's default)"
        )
    if cfg.train.accumulation_steps < 1:
        raise ConfigError(f"train.accumulation_steps={cfg.train.accumulation_steps}: must be >= 1")
    if cfg.train.loss_scale_manager.value == "dynamic" and cfg.train.accumulation_steps > 1:
        raise ConfigError(
            "train.loss_scale_manager=dynamic with train.accumulation_steps > 1 is not supported; "
            "use loss_scale_manager=fixed or accumulation_steps=1"
        )
    if cfg.train.loss_scale_factor <= 1 or cfg.train.loss_scale_window < 1:
        raise ConfigError("train.loss_scale_factor must be > 1 and train.loss_scale_window >= 1")
    if cfg.train.loss_scale <= 0:
        raise ConfigError(f"train.loss_scale={cfg.train.loss_scale}: must be > 0")
    if cfg.train.clip_grad_norm < 0:
        raise ConfigError(
            f"train.clip_grad_norm={cfg.train.clip_grad_norm}: must be >= 0 (0 = off)"
        )
    if not 0.0 < cfg.train.ema.decay < 1.0:
        raise ConfigError(f"train.ema.decay={cfg.train.ema.decay}: must be between 0 and 1")
    if cfg.train.ema.eval_with.value == "ema" and not cfg.train.ema.enabled:
        raise ConfigError("train.ema.eval_with=ema needs train.ema.enabled=true")
    if cfg.callbacks.best.monitor not in ("acc", "loss"):
        raise ConfigError(
            f"callbacks.best.monitor={cfg.callbacks.best.monitor!r}; allowed: acc, loss"
        )
    if cfg.callbacks.best.keep < 0:
        raise ConfigError(f"callbacks.best.keep={cfg.callbacks.best.keep}: must be >= 0")
    _check_parallel(cfg)
    dim_reduce = cfg.boost.name.value == "dim_reduce"
    choices = objective.allowed(dim_reduce, [b.value for b in cfg.boost.baselines])
    if cfg.sweep.objective not in choices:
        raise ConfigError(
            f"sweep.objective={cfg.sweep.objective!r} with boost={cfg.boost.name.value}; "
            f"allowed: {', '.join(choices)}"
        )
    if dim_reduce:
        _check_dim_reduce(cfg)
    if not (isinstance(cfg.resume, bool) or isinstance(cfg.resume, str)):
        raise ConfigError(
            f"resume={cfg.resume!r}; allowed: false, true (newest run), or a run directory"
        )


def _check_parallel(cfg: DictConfig) -> None:
    par = cfg.parallel
    mode = par.mode.value
    if mode == "standalone" and par.workers != 1:
        raise ConfigError(
            f"parallel.mode=standalone runs one process, not parallel.workers={par.workers}; "
            "for data parallel use parallel=data2|data4|data8 or parallel.mode=data"
        )
    batch = cfg.dataset.get("batch_size", 1)
    if not par.per_worker_batch and batch % par.workers:
        raise ConfigError(
            f"dataset.batch_size={batch} is the global batch and must divide evenly across "
            f"parallel.workers={par.workers}; choose a multiple of {par.workers}, or set "
            "parallel.per_worker_batch=true to make dataset.batch_size per worker"
        )
    if par.device_num != par.workers:
        raise ConfigError(
            f"parallel.device_num={par.device_num} must equal parallel.workers={par.workers}"
        )
    if par.nodes < 1 or par.workers % par.nodes:
        raise ConfigError(
            f"parallel.workers={par.workers} must be a multiple of parallel.nodes={par.nodes}"
        )
    if not 0 <= par.node_rank < par.nodes:
        raise ConfigError(f"parallel.node_rank={par.node_rank} must lie in 0..{par.nodes - 1}")


def _check_dim_reduce(cfg: DictConfig) -> None:
    boost = cfg.boost
    for key in ("n_component", "epochs"):
        if boost[key] < 1:
            raise ConfigError(f"boost.{key}={boost[key]}: must be >= 1")
    if not 0 < boost.rho < 1:
        raise ConfigError(f"boost.rho={boost.rho}: must be between 0 and 1 (the second trial step)")
    snap = boost.snapshot
    if snap.per_epoch < 1 or not 1 <= snap.start_epoch <= cfg.epochs:
        raise ConfigError(
            f"boost.snapshot: start_epoch={snap.start_epoch} must lie in 1..epochs={cfg.epochs} "
            f"and per_epoch={snap.per_epoch} must be >= 1"
        )
    expected = (cfg.epochs - snap.start_epoch + 1) * snap.per_epoch
    if boost.stage1_run is None and boost.pca_mat_path is None and expected <= boost.n_component:
        raise ConfigError(
            f"boost=dim_reduce: stage 1 would keep {expected} snapshots ((epochs={cfg.epochs} - "
            f"boost.snapshot.start_epoch={snap.start_epoch} + 1) x boost.snapshot.per_epoch={snap.per_epoch}), "
            f"but boost.n_component={boost.n_component} needs more than {boost.n_component}"
        )
    if boost.stage1_run is not None and cfg.parallel.nodes > 1:
        raise ConfigError(
            f"boost.stage1_run with parallel.nodes={cfg.parallel.nodes}: a finished stage 1's files "
            "live on one node's disk, which the other nodes cannot read; run its stage 1 again "
            "(leave boost.stage1_run unset), or run on one node"
        )
    if cfg.resume not in (False, "false"):
        raise ConfigError(
            "resume=... is not available for boost=dim_reduce pipelines yet; "
            "finished stage-1 runs are reused automatically (boost.reuse_stage1)"
        )


def validate(cfg: DictConfig) -> DictConfig:
    """Check a composed config completely; returns it resolved (no interpolations left).

    Raises ConfigError naming the full key path and what is allowed.
    """
    try:
        resolved = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    except OmegaConfBaseException as ex:
        raise ConfigError(
            f"{getattr(ex, 'full_key', '') or 'config'}: {ex.msg if hasattr(ex, 'msg') else ex}"
        ) from ex
    resolved.pop("hydra", None)
    plain = OmegaConf.merge(OmegaConf.structured(RunConfig), resolved)
    for group in COMPONENT_GROUPS:
        _check_component(group, plain[group])
    _check_schedule(plain.optimizer)
    _check_ranges(plain)
    return plain
