"""The typed schema of a composed config: sporeflow's own nodes as dataclasses.

Each option is one line here: its type, its default (written only here: conf/ holds what a
group option changes), its meaningful range (`Annotated[..., Range]`, core/ranges.py) and a
comment. Relations between options of one node are its `relations()`; `RunConfig.relations()`
holds those across nodes. config/validation.py runs all of them, and the `_target_` checks of
the user-swappable components (model, dataset, optimizer, loss), before any work.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Annotated, Any, Dict, Iterator, List, Optional

from sporeflow.config import objective
from sporeflow.core.ranges import Count, Decay, NonNegative, OpenUnit, Positive, Range

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
    cpu_isa: CpuIsa = CpuIsa.auto  # ONEDNN_MAX_CPU_ISA; auto caps AVX-512 CPUs at AVX2
    threads: Annotated[int, NonNegative] = 0  # intra-op CPU threads per process; 0 = MindSpore's


@dataclass
class TrackingConfig:
    enabled: bool = True
    uri: Optional[str] = None  # None: $MLFLOW_TRACKING_URI or sqlite:///<launch dir>/mlflow.db
    experiment_name: str = "sporeflow"
    run_name: Optional[str] = None  # None: "<model>-<dataset>"
    # seconds a run waits at its end for the store to take the records still in its journal
    # (a busy or unreachable store); what is left is named with `sporeflow sync <run dir>`
    drain_timeout: Annotated[float, NonNegative] = 30.0
    # each stage's final network as an MLflow model (python_function + a MINDIR file beside);
    # stand-alone and data-parallel jobs (sharded weights: sporeflow merge-ckpt first)
    log_model: bool = True
    # seconds between MLflow system metrics samples (CPU, memory, disk, network); 0 = off
    system_metrics_interval: Annotated[float, NonNegative] = 10.0


@dataclass
class StrategyCkptConfig:
    load_file: str = ""
    save_file: str = ""
    only_trainable_params: bool = True


@dataclass
class ParallelConfig:
    mode: ParallelMode = ParallelMode.standalone
    workers: Annotated[int, Count] = 1  # processes in the whole job (MindSpore's device_num)
    device_num: Annotated[int, Count] = 1  # interpolated from workers in the group files
    gradients_mean: bool = True
    parameter_broadcast: bool = False
    all_reduce_fusion_config: List[int] = field(default_factory=list)
    strategy_ckpt_config: StrategyCkptConfig = field(default_factory=StrategyCkptConfig)
    integrated_save: bool = True
    search_mode: SearchMode = SearchMode.sharding_propagation
    shard: Dict[str, Any] = field(default_factory=dict)  # layer (cell path) -> MatMul strategy
    nodes: Annotated[int, Count] = 1
    node_rank: Annotated[int, NonNegative] = 0
    master_addr: str = "127.0.0.1"
    master_port: Annotated[int, NonNegative] = 0  # 0 = a free port
    cluster_time_out: Annotated[int, Count] = 120  # seconds msrun waits for all workers to join
    per_worker_batch: bool = False  # false: dataset.batch_size is the global batch

    def relations(self) -> Iterator[str]:
        if self.mode is ParallelMode.standalone and self.workers != 1:
            yield (
                f"parallel.mode=standalone runs one process, not parallel.workers={self.workers}; "
                "for data parallel use parallel=data2|data4|data8 or parallel.mode=data"
            )
        if self.device_num != self.workers:
            yield f"parallel.device_num={self.device_num} must equal parallel.workers={self.workers}"
        if self.nodes >= 1 and self.workers % self.nodes:
            yield f"parallel.workers={self.workers} must be a multiple of parallel.nodes={self.nodes}"
        if self.nodes >= 1 and not 0 <= self.node_rank < self.nodes:
            yield f"parallel.node_rank={self.node_rank} must lie in 0..{self.nodes - 1}"


@dataclass
class SnapshotConfig:
    start_epoch: Annotated[int, Count] = 3  # first stage-1 epoch (1-based) that keeps snapshots
    per_epoch: Annotated[int, Count] = (
        5  # snapshots per epoch, evenly spaced, the last at epoch end
    )


@dataclass
class BoostConfig:
    name: BoostName = BoostName.none
    n_component: Annotated[int, Count] = 32  # the tutorial's name (the built-in's n_components)
    rho: Annotated[float, OpenUnit] = 0.55  # the second trial step of the line search
    gamma: Annotated[float, Decay] = 0.9  # decay of the out-of-subspace momentum
    alpha: Annotated[float, Positive] = 0.001  # step size of the out-of-subspace update
    sigma: Annotated[float, OpenUnit] = 0.4  # sufficient-decrease (Armijo) constant
    epochs: Annotated[int, Count] = 2  # stage-2 epochs
    start_from: StartFrom = (
        StartFrom.final
    )  # stage 2's first weights: final, or the snapshots' mean
    weight_decay: Annotated[float, NonNegative] = 0.0  # decoupled, on the out-of-subspace update
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    pca_mat_path: Optional[str] = None  # a k x M .npy basis to use instead of computing one
    pca_chunk_mb: Annotated[float, Positive] = 256.0  # memory for one block of the streaming PCA
    baselines: List[Baseline] = field(default_factory=lambda: list(Baseline))
    baseline_epochs: Optional[Annotated[int, Count]] = None  # None = boost.epochs
    anneal_factor: Annotated[float, Positive] = 0.1  # annealed baseline: this x optimizer.lr
    stage1_run: Optional[str] = None  # MLflow run id of a finished stage-1 run to start from
    reuse_stage1: bool = True  # reuse a finished stage 1 with the same fingerprint
    reuse_baselines: bool = True  # reuse finished baselines with the same fingerprint


@dataclass
class CheckpointCallbackConfig:
    every_n_epochs: Annotated[int, Count] = 1
    keep_last: Annotated[int, Count] = 2  # full checkpoints kept (resume reads them)


@dataclass
class BestCheckpointConfig:
    monitor: str = "acc"  # an eval metric: acc | loss
    mode: Monitor = Monitor.max
    keep: Annotated[int, NonNegative] = 1  # 0 = no best-k checkpoints

    def relations(self) -> Iterator[str]:
        if self.monitor not in ("acc", "loss"):
            yield f"callbacks.best.monitor={self.monitor!r}; allowed: acc, loss"


@dataclass
class EmaConfig:
    enabled: bool = False
    decay: Annotated[float, OpenUnit] = 0.999
    warmup: Annotated[float, NonNegative] = 0.0  # decay * (1 - exp(-updates / warmup)); 0 = off
    eval_with: EvalWith = EvalWith.raw  # the weights ranked (best-k) and exported as final.ckpt

    def relations(self) -> Iterator[str]:
        if self.eval_with is EvalWith.ema and not self.enabled:
            yield "train.ema.eval_with=ema needs train.ema.enabled=true"


@dataclass
class TrainStepConfig:
    """The custom train step; all off = a plain mindspore.Model."""

    loss_scale: Annotated[float, Positive] = 1.0  # the fixed scale, or the dynamic scale's start
    # fixed | dynamic: skip overflowed updates, scale / factor; x factor after `window` good steps
    loss_scale_manager: LossScaleManager = LossScaleManager.fixed
    loss_scale_factor: Annotated[float, Range(low=1, low_open=True)] = 2.0  # > 1
    loss_scale_window: Annotated[int, Count] = 1000
    clip_grad_norm: Annotated[float, NonNegative] = 0.0  # by the global norm; 0 = off
    accumulation_steps: Annotated[int, Count] = 1  # micro-batches per optimizer update
    ema: EmaConfig = field(default_factory=EmaConfig)
    amp_level: AmpLevel = AmpLevel.O0  # MindSpore's automatic mixed precision
    keep_batchnorm_fp32: bool = True  # with O3: BatchNorm stays float32

    def relations(self) -> Iterator[str]:
        if self.loss_scale_manager is LossScaleManager.dynamic and self.accumulation_steps > 1:
            yield (
                "train.loss_scale_manager=dynamic with train.accumulation_steps > 1 is not "
                "supported; use loss_scale_manager=fixed or accumulation_steps=1"
            )


@dataclass
class CallbacksConfig:
    progress_bar: bool = True
    log_every_n_steps: Annotated[int, Count] = 1
    stop_on_divergence: bool = True  # a non-finite loss/weights ends the run FAILED
    eval_every_n_epochs: Annotated[int, Count] = 1
    checkpoint: CheckpointCallbackConfig = field(default_factory=CheckpointCallbackConfig)
    best: BestCheckpointConfig = field(default_factory=BestCheckpointConfig)
    # your own hooks (engine.hooks.HookBase subclasses), each a `_target_` node, run after
    # sporeflow's measuring hooks: e.g. [{_target_: sporeflow.engine.hooks.EarlyStopping, patience: 3}]
    hooks: List[Any] = field(default_factory=list)


@dataclass
class SweepConfig:
    # what a sweep ranks jobs by and Optuna optimises: auto (= stage2/acc with boost=dim_reduce,
    # else acc) | acc | loss | gain | <stage>/acc | <stage>/loss (config/objective.py)
    objective: str = "auto"
    # the best job's model goes to MLflow's Model Registry under this name, one version per
    # sweep (null = "<model>-<dataset>", e.g. lenet5-digits; "" = do not register)
    registered_model: Optional[str] = None


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
    epochs: Annotated[int, Count] = 10  # passes over the training split
    seed: int = 1  # MindSpore, numpy, python and dataset shuffling
    mode: Mode = Mode.graph  # MindSpore's execution mode
    device_target: DeviceTarget = DeviceTarget.CPU
    experiment: Optional[str] = None  # the preset from experiments/ (set by experiment=NAME)
    resume: Any = False  # false | true (the newest run) | a run dir

    @property
    def dim_reduce(self) -> bool:
        return self.boost.name is BoostName.dim_reduce

    def relations(self) -> Iterator[str]:
        """What holds between nodes: the batch across workers, the objective the run reports,
        snapshots against epochs, what a pipeline cannot do yet."""
        batch = self.dataset.get("batch_size", 1)
        par = self.parallel
        if (
            isinstance(batch, int)
            and par.workers >= 1
            and not par.per_worker_batch
            and batch % par.workers
        ):
            yield (
                f"dataset.batch_size={batch} is the global batch and must divide evenly across "
                f"parallel.workers={par.workers}; choose a multiple of {par.workers}, or set "
                "parallel.per_worker_batch=true to make dataset.batch_size per worker"
            )
        choices = objective.allowed(self.dim_reduce, [b.value for b in self.boost.baselines])
        if self.sweep.objective not in choices:
            yield (
                f"sweep.objective={self.sweep.objective!r} with boost={self.boost.name.value}; "
                f"allowed: {', '.join(choices)}"
            )
        if not isinstance(self.resume, (bool, str)):
            yield f"resume={self.resume!r}; allowed: false, true (newest run), or a run directory"
        if self.dim_reduce:
            yield from self._dim_reduce_relations()

    def _dim_reduce_relations(self) -> Iterator[str]:
        boost, snap = self.boost, self.boost.snapshot
        if not 1 <= snap.start_epoch <= self.epochs:
            yield f"boost.snapshot.start_epoch={snap.start_epoch} must lie in 1..epochs={self.epochs}"
            return
        expected = (self.epochs - snap.start_epoch + 1) * snap.per_epoch
        if (
            boost.stage1_run is None
            and boost.pca_mat_path is None
            and expected <= boost.n_component
        ):
            yield (
                f"boost=dim_reduce: stage 1 would keep {expected} snapshots ((epochs={self.epochs} - "
                f"boost.snapshot.start_epoch={snap.start_epoch} + 1) x boost.snapshot.per_epoch="
                f"{snap.per_epoch}), but boost.n_component={boost.n_component} needs more than "
                f"{boost.n_component}"
            )
        if boost.stage1_run is not None and self.parallel.nodes > 1:
            yield (
                f"boost.stage1_run with parallel.nodes={self.parallel.nodes}: a finished stage 1's "
                "files live on one node's disk, which the other nodes cannot read; run its stage 1 "
                "again (leave boost.stage1_run unset), or run on one node"
            )
        if self.resume not in (False, "false"):
            yield (
                "resume=... is not available for boost=dim_reduce pipelines yet; "
                "finished stage-1 runs are reused automatically (boost.reuse_stage1)"
            )


def allowed_keys(path: str) -> list[str]:
    """Keys the schema allows at a dotted path ("" = top level, "callbacks.checkpoint");
    empty for component nodes, whose keys depend on their `_target_`."""
    node: Any = RunConfig
    for part in [p for p in path.split(".") if p]:
        hints = typing.get_type_hints(node) if is_dataclass(node) else {}
        if part not in hints:
            return []
        node = hints[part]
    return [f.name for f in fields(node)] if is_dataclass(node) else []
