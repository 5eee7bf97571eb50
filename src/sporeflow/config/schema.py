"""The typed schema of a composed config: sporeflow's own nodes as dataclasses.

Each option is declared once here: its type, its default (written only here: conf/ holds what
a group option changes), its meaningful range (`Annotated[..., Range]`, core/ranges.py) and, in
the docstring on the line below it, what it means. The option reference of the manual is
generated from these (config/reference.py). Relations between options of one node are its
`relations()`; `RunConfig.relations()` holds those across nodes. config/validation.py runs all
of them, and the `_target_` checks of the user-swappable components (model, dataset, optimizer,
loss), before any work.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields, is_dataclass
from enum import Enum
from typing import Annotated, Any, Dict, Iterator, List, Optional

from sporeflow.config import objective
from sporeflow.core.names import StageKind
from sporeflow.core.ranges import (
    Count,
    Decay,
    NonNegative,
    OpenUnit,
    Positive,
    Range,
    Seed,
    range_of,
)
from sporeflow.core.uris import redacted, store_uri_problem

SCHEMA_NAME = "sporeflow_schema"
EVAL_SCHEMA_NAME = "sporeflow_eval_schema"  # eval.py's root (conf/eval.yaml)
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


class MindsporeLog(Enum):
    run_dir = "run_dir"
    console = "console"


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


class AugmentOp(Enum):
    randaugment = "randaugment"
    autoaugment = "autoaugment"
    trivialaugment = "trivialaugment"
    random_erasing = "random_erasing"


RGB_ONLY_OPS = (AugmentOp.randaugment, AugmentOp.autoaugment, AugmentOp.trivialaugment)


class MixOp(Enum):
    none = "none"
    mixup = "mixup"
    cutmix = "cutmix"


# the losses whose softmax cross entropy the mixed (soft) labels train with
MIXABLE_LOSSES = (
    "mindspore.nn.SoftmaxCrossEntropyWithLogits",
    "sporeflow.nn.losses.CrossEntropySmooth",
)


class EvalWith(Enum):
    raw = "raw"
    ema = "ema"


class CheckpointFormat(Enum):
    ckpt = "ckpt"  # each value is the files' suffix
    safetensors = "safetensors"


class Monitor(Enum):
    max = "max"
    min = "min"


class BoostName(Enum):
    none = "none"
    dim_reduce = "dim_reduce"

    @classmethod
    def names_dim_reduce(cls, name: Any) -> bool:
        """Whether `name` (this enum, or the option's name as a composed config holds it) is
        the dim-reduce pipeline: the one place the option is compared."""
        return str(getattr(name, "value", name)) == cls.dim_reduce.value


class StartFrom(Enum):
    final = "final"  # stage 2 starts from stage 1's final weights (MindSpore's built-in does)
    mean = "mean"  # ... from the mean of the snapshots: the PCA's own centre


class Baseline(Enum):
    """The `boost.baselines` options: each one names the stage that runs it (its StageKind)."""

    baseline = StageKind.baseline.value  # plain training continued from stage 1, same budget
    annealed = StageKind.annealed.value  # the same at anneal_factor x LR
    snapshot_mean = StageKind.snapshot_mean.value  # the mean of the stage-1 snapshots
    budget = StageKind.budget.value  # plain training for what stage 2 cost, LR decayed to zero


class BudgetUnit(Enum):
    passes = "passes"  # forward+backward passes, snapshots and PCA by a rule: reproducible
    seconds = "seconds"  # wall seconds of the steps, from both arms' measured step times


@dataclass
class RuntimeConfig:
    """How this machine runs MindSpore's CPU kernels."""

    cpu_isa: CpuIsa = CpuIsa.auto
    """ONEDNN_MAX_CPU_ISA: `auto` caps AVX-512 CPUs at AVX2 (see the training page)."""
    threads: Annotated[int, NonNegative] = 0
    """Intra-op CPU threads per process; 0 keeps MindSpore's default."""
    reuse_graphs: bool = True
    """A stage whose networks compile to the same graph as an earlier stage's in this process
    (a sweep's jobs under the basic launcher, stage 1 and its baselines) trains on that
    compiled graph, every parameter value copied in; false: every stage compiles its own."""
    compile_cache: bool = True
    """Keep compiled graphs on disk for later processes (the next `python train.py`, a sweep's
    workers), each entry checked against the graph it stands for before MindSpore loads it;
    false: every process compiles its graphs."""
    compile_cache_dir: Optional[str] = None
    """Where the compile cache lives; null: `$XDG_CACHE_HOME/sporeflow/compile`
    (`~/.cache/sporeflow/compile`). Keep it on a local disk (see troubleshooting)."""
    compile_cache_max_gb: Annotated[float, Positive] = 10.0
    """The most the compile cache's stored graphs may take on disk, in GiB (all of
    `compile_cache_dir`'s versions together); the least recently used are deleted beyond it."""
    mindspore_log: MindsporeLog = MindsporeLog.run_dir
    """MindSpore's own log lines: `run_dir` writes them (warnings and up) to
    `<run dir>/mindspore_log/rank_<n>/logs/` and shows only its errors on the console (a run
    dir whose path MindSpore refuses for a log - anything but ASCII letters, digits and
    `/@_-.:` - links `mindspore_log` to `$TMPDIR/sporeflow-<uid>/mindspore_log/<digest>/`);
    `console`: MindSpore's default, its warnings on the console. GLOG_* variables you export
    win over both."""


@dataclass
class TrackingConfig:
    """Where MLflow records go and what is logged."""

    enabled: bool = True
    """Record the run in MLflow (false: checkpoints and console only)."""
    uri: Optional[str] = None
    """The store; null: `$MLFLOW_TRACKING_URI`, else `sqlite:///<launch dir>/mlflow.db`."""
    experiment_name: str = "sporeflow"
    """The MLflow experiment the runs go to."""
    run_name: Optional[str] = None
    """The run's name; null: `<model>-<dataset>`."""
    drain_timeout: Annotated[float, NonNegative] = 30.0
    """Seconds a run waits at its end for a writer that makes no progress (the store busy or
    down); what is left is named with `sporeflow sync <run dir>`."""
    log_model: bool = True
    """Each stage's final network as an MLflow model (python_function + MINDIR); stand-alone
    and data-parallel jobs."""
    system_metrics_interval: Annotated[float, NonNegative] = 10.0
    """Seconds between MLflow system-metrics samples (CPU, memory, disk, network); 0 = off."""

    def relations(self) -> Iterator[str]:
        uri = self.uri
        problem = store_uri_problem(uri) if uri else None
        if uri and problem:
            yield f"tracking.uri={redacted(uri)}: {problem}"


@dataclass
class StrategyCkptConfig:
    """MindSpore's parallel strategy file (semi-auto and auto parallel)."""

    load_file: str = ""
    """A strategy file to load (empty: none)."""
    save_file: str = ""
    """Where to save the searched or given strategy (empty: not saved)."""
    only_trainable_params: bool = True
    """Save the strategy of trainable parameters only."""


@dataclass
class ParallelConfig:
    """How many processes train one job, and how they split it."""

    mode: ParallelMode = ParallelMode.standalone
    """One process, data parallel, or MindSpore's semi-auto / auto parallel."""
    workers: Annotated[int, Count] = 1
    """Processes in the whole job (MindSpore's device_num), started with msrun."""
    device_num: Annotated[int, Count] = 1
    """MindSpore's name for `workers`; the group files interpolate it from `workers`."""
    gradients_mean: bool = True
    """All-reduce gradients as a mean (false: a sum)."""
    parameter_broadcast: bool = False
    """Broadcast rank 0's initial weights to every worker."""
    all_reduce_fusion_config: List[int] = field(default_factory=list)
    """Parameter indices where all-reduce fusion groups split (MindSpore's option)."""
    strategy_ckpt_config: StrategyCkptConfig = field(default_factory=StrategyCkptConfig)
    """The strategy file (semi-auto and auto parallel)."""
    integrated_save: bool = True
    """Checkpoints hold whole parameters (false: each rank saves its slices)."""
    search_mode: SearchMode = SearchMode.sharding_propagation
    """How auto parallel searches operator strategies."""
    shard: Dict[str, Any] = field(default_factory=dict)
    """Semi-auto parallel: layer (cell path) -> its MatMul strategy."""
    nodes: Annotated[int, Count] = 1
    """Machines the workers are spread over (`workers` must be a multiple)."""
    node_rank: Annotated[int, NonNegative] = 0
    """This machine's index among `nodes` (0 starts the job's master)."""
    master_addr: str = "127.0.0.1"
    """The address of node 0, where the other nodes join."""
    master_port: Annotated[int, NonNegative] = 0
    """The master's port; 0 = a free port."""
    cluster_time_out: Annotated[int, Count] = 120
    """Seconds msrun waits for all workers to join."""
    per_worker_batch: bool = False
    """false: `dataset.batch_size` is the global batch; true: the batch of each worker."""

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
    """Which stage-1 weights are kept for the PCA."""

    start_epoch: Annotated[int, Count] = 3
    """The first stage-1 epoch (1-based) that keeps snapshots."""
    per_epoch: Annotated[int, Count] = 5
    """Snapshots per epoch, evenly spaced, the last at the epoch's end."""


@dataclass
class BoostConfig:
    """Dimension-reduce training (MindSpore boost `dim_reduce`) and its baselines."""

    name: BoostName = BoostName.none
    """`none`: one plain stage; `dim_reduce`: stage 1, stage 2 and the baselines."""
    n_component: Annotated[int, Count] = 32
    """Dimensions k of the PCA subspace (the tutorial's name; `n_components` is refused)."""
    rho: Annotated[float, OpenUnit] = 0.55
    """The second trial step of the line search."""
    gamma: Annotated[float, Decay] = 0.9
    """Decay of the out-of-subspace momentum."""
    alpha: Annotated[float, Positive] = 0.001
    """Step size of the out-of-subspace update."""
    sigma: Annotated[float, OpenUnit] = 0.4
    """The sufficient-decrease (Armijo) constant."""
    epochs: Annotated[int, Count] = 2
    """Stage-2 epochs."""
    start_from: StartFrom = StartFrom.final
    """Stage 2's first weights: `final` (stage 1's, as MindSpore's built-in) or `mean` (the
    snapshots' mean; BatchNorm statistics from stage 1's final weights)."""
    weight_decay: Annotated[float, NonNegative] = 0.0
    """Decoupled weight decay on the out-of-subspace update."""
    snapshot: SnapshotConfig = field(default_factory=SnapshotConfig)
    """Which stage-1 weights are kept for the PCA."""
    pca_mat_path: Optional[str] = None
    """A k x M `.npy` basis to use instead of computing one."""
    pca_chunk_mb: Annotated[float, Positive] = 256.0
    """Memory for the streaming PCA's blocks (two snapshot blocks and their basis columns), MB."""
    baselines: List[Baseline] = field(default_factory=lambda: list(Baseline))
    """What stage 2 is measured against: plain training continued (`baseline`), the same at a
    lower rate (`annealed`), the snapshots' mean (`snapshot_mean`), and plain training given
    what stage 2 cost with its rate decayed linearly to zero (`budget`: the verdict at equal
    cost, `gain_at_cost`)."""
    budget_unit: BudgetUnit = BudgetUnit.passes
    """What the budget arm gets as much of as stage 2 spent (snapshots and PCA included):
    `passes` (forward+backward passes, the snapshots and PCA counted in passes by a rule from
    their size: reproducible on any machine at any load) or `seconds` (measured wall seconds of
    the steps, snapshots and PCA; its step count follows from both arms' measured seconds per
    step, so it moves with the machine's load)."""
    target_acc: Optional[Annotated[float, OpenUnit]] = None
    """An accuracy to reach: each arm's cost (passes since stage 1's end) to first reach it is
    recorded as `<arm>/passes_to_target` and printed (never reached: infinite, as AlgoPerf
    scores it; MLflow stores infinity as the largest float, 1.8e308)."""
    baseline_epochs: Optional[Annotated[int, Count]] = None
    """Epochs of each trained baseline; null = `boost.epochs`."""
    anneal_factor: Annotated[float, Positive] = 0.1
    """The annealed baseline's rate: this x `optimizer.lr`."""
    stage1_run: Optional[str] = None
    """The MLflow run id of a finished stage-1 run to start from."""
    reuse_stage1: bool = True
    """Reuse a finished stage 1 whose fingerprint (model, data, optimizer, loss, train, epochs,
    seed, mode, snapshot settings) matches: a sweep over rho/gamma/sigma trains stage 1 once."""
    reuse_baselines: bool = True
    """Reuse a finished baseline whose fingerprint (stage 1's, the baseline, its epochs and
    anneal factor) matches: a sweep over stage-2 settings trains each baseline once."""


@dataclass
class CheckpointCallbackConfig:
    """Full checkpoints (weights and optimizer state) that a resume reads."""

    every_n_epochs: Annotated[int, Count] = 1
    """Save a full checkpoint every this many epochs."""
    keep_last: Annotated[int, Count] = 2
    """Full checkpoints kept (the newest)."""
    format: CheckpointFormat = CheckpointFormat.ckpt
    """The file format of every checkpoint the run writes (full, best and final, and the
    model's weights): `ckpt` (MindSpore's own) or `safetensors`. Resume, eval.py, predict,
    `model.init_from` and the MLflow model read either."""


@dataclass
class BestCheckpointConfig:
    """The best checkpoints by a validation metric."""

    monitor: str = "acc"
    """The validation metric that ranks them (`val/acc` or `val/loss`): `acc` or `loss`."""
    mode: Monitor = Monitor.max
    """`max` or `min` of the monitored metric is best."""
    keep: Annotated[int, NonNegative] = 1
    """Best checkpoints kept; 0 = none."""

    def relations(self) -> Iterator[str]:
        if self.monitor not in ("acc", "loss"):
            yield f"callbacks.best.monitor={self.monitor!r}; allowed: acc, loss"


@dataclass
class EmaConfig:
    """Exponential moving average (EMA) shadow weights."""

    enabled: bool = False
    """Keep EMA weights, updated after each optimizer update."""
    decay: Annotated[float, OpenUnit] = 0.999
    """The EMA's decay per update."""
    warmup: Annotated[float, NonNegative] = 0.0
    """With warmup > 0 the decay is `decay * (1 - exp(-updates / warmup))`; 0 = off."""
    eval_with: EvalWith = EvalWith.raw
    """The weights ranked (best-k) and exported as the final checkpoint: `raw` or `ema`."""

    def relations(self) -> Iterator[str]:
        if self.eval_with is EvalWith.ema and not self.enabled:
            yield "train.ema.eval_with=ema needs train.ema.enabled=true"


@dataclass
class TrainStepConfig:
    """The custom train step; all off = a plain mindspore.Model."""

    loss_scale: Annotated[float, Positive] = 1.0
    """The fixed loss scale, or the dynamic scale's start; gradients are unscaled before
    anything else reads them."""
    loss_scale_manager: LossScaleManager = LossScaleManager.fixed
    """`dynamic`: an overflowed update is skipped and the scale divided by
    `loss_scale_factor`, then multiplied by it after `loss_scale_window` finite steps."""
    loss_scale_factor: Annotated[float, Range(low=1, low_open=True)] = 2.0
    """The dynamic scale's factor."""
    loss_scale_window: Annotated[int, Count] = 1000
    """Finite steps before the dynamic scale grows."""
    clip_grad_norm: Annotated[float, NonNegative] = 0.0
    """Clip by the global norm of all gradients, once per update; 0 = off."""
    accumulation_steps: Annotated[int, Count] = 1
    """Micro-batches per optimizer update (LR and EMA advance per update; a schedule is built
    in updates, floor(epochs x batches / k), so it ends at the last epoch's end; `train/lr` is
    the rate of each epoch's last update)."""
    ema: EmaConfig = field(default_factory=EmaConfig)
    """EMA shadow weights."""
    amp_level: AmpLevel = AmpLevel.O0
    """MindSpore's automatic mixed precision, O0-O3."""
    keep_batchnorm_fp32: bool = True
    """With O3: BatchNorm stays float32."""
    init_from: Optional[str] = None
    """Fine-tune: a finished run (run dir, stage dir, MLflow run id, models:/name/version) or
    a .ckpt or .safetensors file whose weights start this run where name and shape match; the rest (e.g. a
    classifier for another `num_classes`) stay as initialised and are named in one line. With
    boost=dim_reduce, stage 1 starts from it."""
    freeze: List[str] = field(default_factory=list)
    """Parameter name prefixes kept fixed while training (e.g. `[conv1, conv2]`); each must
    match a parameter. Not with boost=dim_reduce yet."""

    def relations(self) -> Iterator[str]:
        if self.loss_scale_manager is LossScaleManager.dynamic and self.accumulation_steps > 1:
            yield (
                "train.loss_scale_manager=dynamic with train.accumulation_steps > 1 is not "
                "supported; use loss_scale_manager=fixed or accumulation_steps=1"
            )


@dataclass
class CallbacksConfig:
    """What runs around the train loop: progress, logging, evaluation, checkpoints, hooks."""

    progress_bar: bool = True
    """A progress bar per stage on the console."""
    log_every_n_steps: Annotated[int, Count] = 1
    """`train/loss` to MLflow every this many steps."""
    stop_on_divergence: bool = True
    """A non-finite loss or weights end the run FAILED."""
    eval_every_n_epochs: Annotated[int, Count] = 1
    """Evaluate on the validation split every this many epochs (`val/*`: what best-k,
    early stopping and the pruner read)."""
    checkpoint: CheckpointCallbackConfig = field(default_factory=CheckpointCallbackConfig)
    """Full checkpoints that a resume reads."""
    best: BestCheckpointConfig = field(default_factory=BestCheckpointConfig)
    """The best checkpoints by a validation metric."""
    hooks: List[Any] = field(default_factory=list)
    """Your own hooks (`engine.hooks.HookBase` subclasses), each a `_target_` node, run right
    after the phase of sporeflow's own that the class's `place` names (`guard`, `measure` by
    default, `record`): e.g. `[{_target_: sporeflow.engine.hooks.EarlyStopping, patience: 3}]`."""


@dataclass
class AugmentConfig:
    """Augmentation recipes from MindSpore's own transforms, on the training split only, after
    the data set's own (crop, flip); evaluation, eval.py and predict never see them."""

    ops: List[AugmentOp] = field(default_factory=list)
    """In order: `randaugment`, `autoaugment` (ImageNet policy), `trivialaugment`
    (TrivialAugmentWide) on the RGB image (3 channels only); `random_erasing` (a rectangle
    erased with probability 0.5) on the normalised one. `[]`: the data set's own only."""
    mix: MixOp = MixOp.none
    """Batch-level mixing of the training split: `mixup` (MixUpBatch: each image blended with
    another of its batch), `cutmix` (CutMixBatch: a rectangle pasted from another); the labels
    become the same mixture of one-hot vectors, trained with softmax cross entropy on them
    (label smoothing from `loss.smooth_factor` composed in); evaluation keeps integer labels."""
    mix_alpha: Annotated[float, Positive] = 1.0
    """The Beta(alpha, alpha) the mixing ratio is drawn from."""


@dataclass
class SweepConfig:
    """How a sweep (`-m`) ranks its jobs and what it registers."""

    objective: Any = "auto"
    """What a sweep ranks jobs by and Optuna optimises, always on the validation split:
    `auto` (val/stage2/acc with boost=dim_reduce, else val/acc), `val/acc`, `val/loss`,
    `val/gain`, `val/gain_at_cost`, `val/<stage>/acc`, `val/<stage>/loss`; the names without
    `val/` stand for these. A `test/` objective is refused (config.objective). Accuracy and
    cost together: `[<one of these>, <cost>]`, the cost `cost/passes` (a plain job) or
    `stage2/passes` (a pipeline; its `cost/passes` is an alias of it): the sweep ends with a
    Pareto front (report.front)."""
    registered_model: Optional[str] = None
    """The best job's model goes to MLflow's Model Registry under this name, one version per
    sweep; null = `<model>-<dataset>`, `""` = no registration."""
    skip_finished: bool = True
    """A sweep job that finished before in the same store, with the same settings, seed, code,
    MindSpore and data, is not trained again: its run copies that one's metrics and per-image
    predictions (`sporeflow.copied_from`). false: train every job. Grids and races of
    single-worker jobs (an Optuna study continues by itself)."""


@dataclass
class RunConfig:
    """The root of a composed config: the run-level keys and every node."""

    model: Dict[str, Any] = field(default_factory=dict)
    """The network: a `_target_` node (group `model`)."""
    dataset: Dict[str, Any] = field(default_factory=dict)
    """The data set and its transforms: a `_target_` node (group `dataset`)."""
    optimizer: Dict[str, Any] = field(default_factory=dict)
    """The optimizer factory and its schedule: a `_target_` node (group `optimizer`)."""
    loss: Dict[str, Any] = field(default_factory=dict)
    """The loss: a `_target_` node (group `loss`)."""
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    """How many processes train one job (group `parallel`)."""
    boost: BoostConfig = field(default_factory=BoostConfig)
    """Dimension-reduce training (group `boost`)."""
    callbacks: CallbacksConfig = field(default_factory=CallbacksConfig)
    """Around the train loop (group `callbacks`)."""
    train: TrainStepConfig = field(default_factory=TrainStepConfig)
    """The custom train step."""
    augment: AugmentConfig = field(default_factory=AugmentConfig)
    """Augmentation recipes on top of the data set's own."""
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)
    """MindSpore's CPU kernels on this machine."""
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    """MLflow."""
    sweep: SweepConfig = field(default_factory=SweepConfig)
    """Sweeps (`-m`)."""
    epochs: Annotated[int, Count] = 10
    """Passes over the training split (stage 1's with boost=dim_reduce)."""
    seed: Annotated[int, Seed] = 1
    """Seeds MindSpore, numpy, python and dataset shuffling (0 to 2**32 - 1: numpy's and
    MindSpore's data sets' seeds are unsigned 32-bit)."""
    mode: Mode = Mode.graph
    """MindSpore's execution mode."""
    device_target: DeviceTarget = DeviceTarget.CPU
    """The device MindSpore runs on."""
    experiment: Optional[str] = None
    """The preset from `experiments/`, set by `experiment=NAME`."""
    resume: Any = False
    """`false`, `true` (the newest run under `outputs/`) or a run dir to continue."""

    @property
    def dim_reduce(self) -> bool:
        return BoostName.names_dim_reduce(self.boost.name)

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
        baselines = [b.value for b in self.boost.baselines]
        refused = objective.refusal(self.sweep.objective, self.dim_reduce, baselines)
        if refused:
            yield f"{refused} (boost={self.boost.name.value})"
        rgb_only = [op.value for op in self.augment.ops if op in RGB_ONLY_OPS]
        channels = self.dataset.get("channels", 3)
        if rgb_only and channels != 3:
            yield (
                f"augment.ops: {', '.join(rgb_only)} {'takes' if len(rgb_only) == 1 else 'take'}"
                f" RGB images and dataset.channels="
                f"{channels}; with {channels}-channel images use random_erasing, or none"
            )
        target = self.loss.get("_target_")
        if self.augment.mix is not MixOp.none and target not in MIXABLE_LOSSES:
            yield (
                f"augment.mix={self.augment.mix.value} trains on mixed (soft) labels with softmax "
                f"cross entropy; loss {target} takes integer labels only (use loss=softmax_ce "
                "or loss=ce_smooth)"
            )
        if self.callbacks.checkpoint.format is CheckpointFormat.safetensors and not (
            self.parallel.integrated_save
        ):
            yield (
                "callbacks.checkpoint.format=safetensors with parallel.integrated_save=false: "
                "`sporeflow merge-ckpt` joins per-rank slices from .ckpt files only; write "
                "them as ckpt (the default), or keep whole parameters (integrated_save=true)"
            )
        if not isinstance(self.resume, (bool, str)):
            yield f"resume={self.resume!r}; allowed: false, true (newest run), or a run directory"
        if self.dim_reduce:
            yield from self._dim_reduce_relations()

    def _dim_reduce_relations(self) -> Iterator[str]:
        boost, snap = self.boost, self.boost.snapshot
        if self.train.freeze:
            yield (
                "train.freeze with boost=dim_reduce is not available yet (stage 2's PCA subspace "
                "spans every trainable weight); use it with boost=none"
            )
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


def range_at(path: str) -> str:
    """The range the schema gives the key at a dotted path (`boost.rho`: "in (0, 1)"); "" where
    it gives none (no such key, a component's key, a key without a range)."""
    node: Any = RunConfig
    hint: Any = None
    for part in [p for p in path.split(".") if p]:
        hints = typing.get_type_hints(node, include_extras=True) if is_dataclass(node) else {}
        if part not in hints:
            return ""
        hint = node = hints[part]
    found = range_of(hint)
    return str(found) if found is not None else ""


class Split(Enum):
    test = "test"
    val = "val"
    train = "train"


@dataclass
class EvalConfig(RunConfig):
    """The root of eval.py's config: a run config (the source's own, with the keys given on
    the command line over it) and what to evaluate."""

    source: str = "???"
    """The run to evaluate: its run dir, one of its stage dirs, its MLflow run id, a
    registered model version (models:/name/version, models:/name@alias), or a .ckpt or .safetensors file."""
    split: Split = Split.test
    """The split evaluated, in order and without augmentation."""


# eval.py's own keys, not a run config's (taken out before a composed eval config is validated)
EVAL_KEYS = tuple(
    f.name for f in fields(EvalConfig) if f.name not in {g.name for g in fields(RunConfig)}
)
