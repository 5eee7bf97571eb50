"""One stage of training, inside its own MLflow run:
dataset -> parts (stages.build) -> callbacks -> fit (engine) -> final eval -> files -> MLflow.

A resumed stage restores the newest complete checkpoint (weights, optimizer state, EMA, step),
continues at the next epoch and in the same MLflow run.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from mindspore import Model, Tensor
from omegaconf import DictConfig

from sporeflow.config.components import build_dataset, build_loss, build_model
from sporeflow.config.schema import EvalWith, LossScaleManager
from sporeflow.core.context import RunContext, global_batch_size, worker_batch_size
from sporeflow.core.errors import DataError, DivergedError
from sporeflow.dim_reduce.snapshots import SnapshotCallback
from sporeflow.engine.batchnorm import recompute_batchnorm
from sporeflow.engine.callbacks import (
    BestCheckpoints,
    CheckpointEachEpoch,
    EvalEachEpoch,
    ProgressBar,
    StepLoss,
    Throughput,
)
from sporeflow.engine.divergence import DivergenceGuard, TrainingDiverged
from sporeflow.engine.events import EventRecord
from sporeflow.engine.loop import StageParts, fit
from sporeflow.engine.predictions import correct_per_example
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stages import pruning
from sporeflow.stages.build import StagePlan, build_stage_parts, eval_metrics
from sporeflow.stages.outputs import record_data, record_model
from sporeflow.stages.runs import guarded, record_config, start_job_run
from sporeflow.stages.writer import MlflowWriter
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    load_weights,
    newest_complete_checkpoint,
    restore_exact,
    save_atomic,
)
from sporeflow.storage.files import atomic_path
from sporeflow.storage.run_marker import read_run_marker, write_run_marker
from sporeflow.tracking.tracker import TrackedRun, Tracker

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    name: str
    metrics: dict  # final eval metrics of the exported weights: acc, loss
    checkpoint: Path  # network weights after the stage (EMA if eval_with=ema)
    images_per_sec: float
    history: list = field(default_factory=list)  # [(epoch, {metric: value})]
    batching: str = ""  # workers, per-worker and global batch, optimizer updates
    correct: np.ndarray | None = None  # per eval image: right or not (paired comparisons)
    run_id: str | None = None  # its MLflow run (None when tracking is off)


PREDICTIONS = "predictions.npy"


def save_predictions(stage_dir: Path, correct: np.ndarray) -> None:
    """`<stage dir>/predictions.npy`: right/wrong per eval image (a reused stage 1 brings it along)."""
    with atomic_path(Path(stage_dir) / PREDICTIONS) as tmp:
        np.save(tmp, correct.astype(bool))


def load_predictions(stage_dir: Path) -> np.ndarray | None:
    path = Path(stage_dir) / PREDICTIONS
    return np.load(path, allow_pickle=False) if path.is_file() else None


def describe_batching(cfg: DictConfig, steps_per_epoch: int) -> str:
    """ "2 workers x batch 16 = global batch 32, 450 optimizer updates" (stand-alone: "batch 32, ...")."""
    updates = cfg.epochs * steps_per_epoch // cfg.train.accumulation_steps
    split = (
        f"{cfg.parallel.workers} workers x batch {worker_batch_size(cfg)} = global "
        if cfg.parallel.workers > 1
        else ""
    )
    return f"{split}batch {global_batch_size(cfg)}, {updates} optimizer updates"


def fit_callbacks(
    cfg: DictConfig,
    name: str,
    record: EventRecord,
    parts: StageParts,
    eval_data,
    ckpt_dir: Path,
    worker: Worker,
    run: TrackedRun,
    plan: StagePlan,
) -> tuple[list, Throughput, EvalEachEpoch]:
    """The stage's callbacks in the order they must run at a step and an epoch end:
    guard (stop before anything sees diverged weights) -> measure (snapshots, throughput, loss,
    eval) -> write the record to MLflow (rank 0) -> act on it (best-k, epoch checkpoints) -> show
    it (progress bar, rank 0). Writing before checkpointing keeps this true: when epoch e's
    checkpoint exists, epoch e's metrics are in MLflow, so a resumed run continues them exactly."""
    cb_cfg = cfg.callbacks
    ema_ranked = cfg.train.ema.eval_with is EvalWith.ema
    throughput = Throughput(
        record, global_batch_size(cfg)
    )  # rank 0's step rate x the global batch: the job's
    evaluator = EvalEachEpoch(
        record, parts.model, eval_data, cb_cfg.eval_every_n_epochs, parts.ema_swap
    )
    callbacks = []
    if cb_cfg.stop_on_divergence:  # first: before anything saves or evaluates diverged weights
        callbacks.append(
            DivergenceGuard(
                record,
                parts.network,
                tolerate_nonfinite_loss=cfg.train.loss_scale_manager is LossScaleManager.dynamic,
            )
        )
    if plan.snapshot_dir is not None:
        snap = cfg.boost.snapshot
        callbacks.append(
            SnapshotCallback(
                parts.network,
                plan.snapshot_dir,
                snap.start_epoch,
                snap.per_epoch,
                record.steps_per_epoch,
            )
        )
    callbacks.append(throughput)
    if worker.is_main:  # the loss is read to the host only where something shows or writes it
        callbacks.append(StepLoss(record, cb_cfg.log_every_n_steps))
    callbacks.append(evaluator)
    if worker.is_main:
        callbacks.append(MlflowWriter(record, run))
    if cb_cfg.best.keep:
        callbacks.append(
            BestCheckpoints(
                record,
                parts.network,
                ckpt_dir,
                cb_cfg.best.monitor + ("_ema" if ema_ranked else ""),
                cb_cfg.best.mode.value,
                cb_cfg.best.keep,
                parts.ema_swap if ema_ranked else None,
            )
        )
    callbacks.append(
        CheckpointEachEpoch(
            record,
            ckpt_dir,
            cb_cfg.checkpoint.every_n_epochs,
            cb_cfg.checkpoint.keep_last,
            cfg.parallel.integrated_save,
        )
    )
    reporter = pruning.for_stage(cfg, name, record, worker)  # after the epoch is saved
    if reporter is not None:
        callbacks.append(reporter)
    if worker.is_main and cb_cfg.progress_bar:
        callbacks.append(ProgressBar(record, name))
    return callbacks, throughput, evaluator


def diverged_message(name: str, ex: TrainingDiverged, ckpt_dir: Path, stage_dir: Path) -> str:
    finite = sorted(ckpt_dir.glob("epoch_*.ckpt"))
    kept = (
        f"the last finite checkpoint is {finite[-1]} (resume={stage_dir} continues from it)"
        if finite
        else "no checkpoint was written before it"
    )
    return (
        f"stage {name} {ex}; nothing after it was saved, {kept}. Lower optimizer.lr or set "
        "train.clip_grad_norm; callbacks.stop_on_divergence=false trains on regardless"
    )


@dataclass
class PreparedStage:
    """Everything a stage needs before it touches MLflow: data opened, parts built, a resumed
    checkpoint loaded into them. A stage that cannot get this far leaves no trace in MLflow
    (and a resumed run keeps the status it had)."""

    name: str
    cfg: DictConfig
    stage_dir: Path
    ckpt_dir: Path
    worker: Worker
    plan: StagePlan
    start_epoch: int
    train_data: object
    eval_data: object
    steps_per_epoch: int
    parts: StageParts
    data: object = None  # the ImageDataset both splits come from


def prepare_stage(
    name: str,
    cfg: DictConfig,
    stage_dir: Path,
    worker: Worker = Worker(),
    resume: bool = False,
    plan: StagePlan = StagePlan(),
) -> PreparedStage:
    if worker.is_main:
        log.info("stage %s: building the data set, the network and its train step", name)
    ckpt_dir = checkpoint_dir(stage_dir, worker.rank, worker.world_size)
    start_epoch, state = 0, None
    if resume:
        path, state = newest_complete_checkpoint(ckpt_dir)
        start_epoch = int(state["epoch_num"].asnumpy())
        log.info("resuming %s from %s (epoch %d)", name, path, start_epoch)
    data = build_dataset(cfg, batch_size=worker_batch_size(cfg))
    train_data = data.create(
        "train", seed=cfg.seed, start_epoch=start_epoch, **worker.dataset_args()
    )
    eval_data = data.create("test")
    steps_per_epoch = train_data.get_dataset_size()
    if steps_per_epoch == 0:
        raise DataError(
            f"the training split of {cfg.dataset._target_} yields no batch of "
            f"{worker_batch_size(cfg)} (drop_remainder={getattr(data, 'drop_remainder', False)})"
        )
    parts = build_stage_parts(cfg, plan, steps_per_epoch)
    if state is not None:
        restore_exact(state, *parts.state_cells)
    return PreparedStage(
        name,
        cfg,
        stage_dir,
        ckpt_dir,
        worker,
        plan,
        start_epoch,
        train_data,
        eval_data,
        steps_per_epoch,
        parts,
        data,
    )


def run_stage(stage: PreparedStage, run: TrackedRun) -> StageResult:
    """Train up to `cfg.epochs` epochs, evaluate, export `final.ckpt`, report to the run."""
    cfg, parts, name = stage.cfg, stage.parts, stage.name
    batching = describe_batching(cfg, stage.steps_per_epoch)
    log.info(
        "stage %s: epochs %d..%d x %d steps; %s",
        name,
        stage.start_epoch + 1,
        cfg.epochs,
        stage.steps_per_epoch,
        batching,
    )
    if stage.worker.is_main:
        run.set_tags(
            {
                "batch.per_worker": worker_batch_size(cfg),
                "batch.global": global_batch_size(cfg),
                "batch.workers": cfg.parallel.workers,
            }
        )
        record_data(run, stage.data)
    record = EventRecord(cfg.epochs, stage.steps_per_epoch, stage.start_epoch)
    callbacks, throughput, evaluator = fit_callbacks(
        cfg, name, record, parts, stage.eval_data, stage.ckpt_dir, stage.worker, run, stage.plan
    )
    try:
        fit(parts, stage.train_data, cfg.epochs, callbacks, stage.start_epoch)
    except TrainingDiverged as ex:
        raise DivergedError(diverged_message(name, ex, stage.ckpt_dir, stage.stage_dir)) from None

    latest = record.latest_eval()
    final = latest[1] if latest is not None else evaluator.evaluate()
    ema_ranked = cfg.train.ema.eval_with is EvalWith.ema
    exported = (
        {k[:-4]: v for k, v in final.items() if k.endswith("_ema")}
        if ema_ranked
        else {k: v for k, v in final.items() if not k.endswith("_ema")}
    )
    last_step = cfg.epochs * stage.steps_per_epoch
    with (parts.ema_swap if ema_ranked else nullcontext)():
        weights = save_atomic(parts.network, stage.ckpt_dir / "final.ckpt")
        correct = correct_per_example(parts.network, stage.eval_data)
        if stage.worker.is_main:
            record_model(
                cfg, run, parts.network, weights, stage.eval_data, stage.stage_dir, last_step
            )
    if parts.ema_swap is not None and not ema_ranked:
        with parts.ema_swap():
            save_atomic(parts.network, stage.ckpt_dir / "final_ema.ckpt")
    if stage.worker.is_main:
        save_predictions(stage.stage_dir, correct)
        run.log_metrics({f"final/{k}": v for k, v in exported.items()}, last_step)
        run.log_metrics({"final/images_per_sec": throughput.mean}, last_step, flush=True)
        run.log_artifact(weights, "checkpoints")
    return StageResult(
        name, exported, weights, throughput.mean, record.evals, batching, correct, run.run_id
    )


def network_with(cfg: DictConfig, base: Path, weights: dict):
    """The config's network holding `base`'s weights, its trainable ones replaced by `weights`
    (name -> array): BatchNorm statistics and other non-trainables stay `base`'s."""
    network = build_model(cfg)
    load_weights(network, base)
    for param in network.trainable_params():
        param.set_data(Tensor(np.asarray(weights[param.name], dtype=np.float32)))
    return network


def evaluate_weights(
    name: str, cfg: DictConfig, weights: dict, base: Path, run: TrackedRun, stage_dir: Path
) -> StageResult:
    """A stage with no training: `base` weights overlaid with `weights` (name -> array),
    BatchNorm statistics recomputed on training batches when the network has BatchNorm."""
    network = network_with(cfg, base, weights)
    data = build_dataset(cfg)
    if recompute_batchnorm(network, data.create("train", seed=cfg.seed)):
        log.info("%s: BatchNorm statistics recomputed on the training split", name)
    model = Model(network, loss_fn=build_loss(cfg), metrics=eval_metrics())
    eval_data = data.create("test")
    result = {k: float(v) for k, v in model.eval(eval_data, dataset_sink_mode=False).items()}
    path = save_atomic(network, checkpoint_dir(stage_dir) / "final.ckpt")
    correct = correct_per_example(network, eval_data)
    save_predictions(stage_dir, correct)
    record_data(run, data)
    record_model(cfg, run, network, path, eval_data, stage_dir, 0)
    run.log_metrics({f"final/{k}": v for k, v in result.items()}, 0, flush=True)
    run.log_metrics({f"eval/{k}": v for k, v in result.items()}, 0, flush=True)
    return StageResult(
        name, result, path, float("nan"), [(0, result)], correct=correct, run_id=run.run_id
    )


def tracked_stage(
    tracker: Tracker,
    stage: str,
    cfg: DictConfig,
    ctx: RunContext,
    resume_dir: Path | None = None,
    parent: TrackedRun | None = None,
    plan: StagePlan = StagePlan(),
    stage_dir: Path | None = None,
    tags: dict | None = None,
    worker: Worker = Worker(),
) -> StageResult:
    """Run one stage inside its own MLflow run (a child of `parent` in a pipeline).

    Resuming continues in `resume_dir` (its checkpoints, its MLflow run). The stage is prepared
    first: what cannot start creates no run and changes none.
    """
    stage_dir = resume_dir or stage_dir or ctx.run_dir
    prepared = prepare_stage(
        stage, cfg, stage_dir, worker, resume=resume_dir is not None, plan=plan
    )
    marker = read_run_marker(stage_dir) if resume_dir else {}
    if marker.get("mlflow_run_id"):
        run = tracker.resume_run(
            marker["mlflow_run_id"], system_metrics=cfg.tracking.system_metrics_interval
        )
        run.set_tags({"resumed_in": str(ctx.run_dir), "resume_overrides": " ".join(ctx.overrides)})
    else:
        if parent is None:
            run = start_job_run(tracker, cfg, ctx, stage)
        else:
            run = tracker.start_run(
                stage,
                tags={"stage": stage},
                parent=parent,
                system_metrics=cfg.tracking.system_metrics_interval,
            )
            record_config(run, cfg, ctx, stage)
        run.set_tags({"run_dir": str(stage_dir), **(tags or {})})
    if worker.is_main:
        write_run_marker(stage_dir, mlflow_run_id=run.run_id, tracking_uri=tracker.uri, stage=stage)
    return guarded(run, lambda: run_stage(prepared, run))
