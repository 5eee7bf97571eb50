"""One stage's training, once its run is open: the parts built and a resumed checkpoint
loaded (`prepare`), then hooks -> fit (engine), evaluating on the validation split -> the
exported weights measured on validation and, once, on test -> files -> the run (`train`).

A resumed stage restores the newest complete checkpoint (weights, optimizer state, EMA, step,
the hooks' state), continues at the next epoch and in the same MLflow run."""

from __future__ import annotations

import logging
import math
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from sporeflow.config.facts import checkpoint_format, global_batch_size, worker_batch_size
from sporeflow.config.schema import EvalWith
from sporeflow.core.errors import DataError, DivergedError
from sporeflow.dim_reduce.step import SETTING_PREFIX
from sporeflow.engine.divergence import TrainingDiverged
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import load_hooks_state
from sporeflow.engine.loop import StageParts, fit
from sporeflow.nn.optimizers import DECAY_NAME, RATE_NAME
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stage.build import build_stage_parts
from sporeflow.stage.hooks import StageHooks, stage_hooks
from sporeflow.stage.outputs import record_data, record_model
from sporeflow.stage.result import (
    Ended,
    StageResult,
    ended,
    save_predictions,
    with_passes,
)
from sporeflow.stage.spec import StageSpec
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    checkpoint_files,
    newest_complete_checkpoint,
    restore_exact,
    save_atomic,
)
from sporeflow.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)


@dataclass
class PreparedStage:
    """Everything a stage needs before it touches MLflow: data opened, parts built, a resumed
    checkpoint loaded into them. A stage that cannot get this far leaves no trace in MLflow
    (and a resumed run keeps the status it had)."""

    spec: StageSpec
    cfg: DictConfig
    ckpt_dir: Path
    worker: Worker
    start_epoch: int
    start_batches: int  # of epoch start_epoch + 1, trained before a stop mid-epoch
    resumed_from: Path | None  # the checkpoint a resumed stage continues from
    train_data: object
    val_data: object  # every evaluation during training reads it: what choices see
    test_data: object  # read once, at the stage's end: what reports show
    steps_per_epoch: int
    parts: StageParts
    data: object  # the ImageDataset both splits come from


def set_by_config(name: str) -> bool:
    """A parameter the config sets (the optimizer's weight decay, stage 2's settings: graph
    inputs since issue 50), which a checkpoint written before may lack: the config's value holds
    (a resume trains on its run's own config)."""
    return name == DECAY_NAME or name.startswith(SETTING_PREFIX)


def rebuilt_by_config(name: str) -> bool:
    """The optimizer's learning rate (a float or the schedule's per-update table, built for the
    resumed run's `epochs`): never taken from a checkpoint; the optimizer's update count
    (`global_step`) and moments are, so the schedule goes on at the update it reached."""
    return name == RATE_NAME


def describe_batching(
    cfg: DictConfig, epochs: int, steps_per_epoch: int, max_steps: int | None = None
) -> str:
    """ "2 workers x batch 16 = global batch 32, 450 optimizer updates" (stand-alone: "batch 32, ...");
    `max_steps`: a stage cut there (the budget arm)."""
    steps = (
        epochs * steps_per_epoch if max_steps is None else min(max_steps, epochs * steps_per_epoch)
    )
    updates = steps // cfg.train.accumulation_steps
    workers = cfg.parallel.workers
    split = f"{workers} workers x batch {worker_batch_size(cfg)} = global " if workers > 1 else ""
    return f"{split}batch {global_batch_size(cfg)}, {updates} optimizer updates"


def prepare(cfg: DictConfig, spec: StageSpec, data, worker: Worker, resume: bool) -> PreparedStage:
    """Open the splits of `data` (the job's data set, built once) and build the stage's parts."""
    if worker.is_main:
        log.info("stage %s: building the network and its train step", spec.name)
    ckpt_dir = checkpoint_dir(spec.stage_dir, worker.rank, worker.world_size)
    start_epoch, start_batches, state, path = 0, 0, None, None
    if resume:
        path, state = newest_complete_checkpoint(ckpt_dir)
        start_epoch = int(state["epoch_num"].asnumpy())
        if "epoch_step" in state:  # written mid-epoch (a requeue): the batches already trained
            start_batches = int(state["epoch_step"].asnumpy())
        log.info(
            "resuming %s from %s (epoch %d, %d batches into the next)",
            spec.name,
            path,
            start_epoch,
            start_batches,
        )
    train_data = data.create(
        "train", seed=cfg.seed, start_epoch=start_epoch, **worker.dataset_args()
    )
    if start_batches:  # MindSpore's own fast-forward: its first epoch starts after them
        train_data.set_init_step(start_batches)
    steps_per_epoch = train_data.get_dataset_size()
    if steps_per_epoch == 0:
        raise DataError(
            f"the training split of {cfg.dataset._target_} yields no batch of "
            f"{worker_batch_size(cfg)} (drop_remainder={getattr(data, 'drop_remainder', False)})"
        )
    parts = build_stage_parts(cfg, spec, steps_per_epoch)
    if state is not None:
        restore_exact(
            state, *parts.state_cells, from_config=set_by_config, rebuilt=rebuilt_by_config
        )
    return PreparedStage(
        spec,
        cfg,
        ckpt_dir,
        worker,
        start_epoch,
        start_batches,
        path,
        train_data,
        data.create("val"),
        data.create("test"),
        steps_per_epoch,
        parts,
        data,
    )


def diverged_message(name: str, ex: TrainingDiverged, ckpt_dir: Path, stage_dir: Path) -> str:
    finite = checkpoint_files(ckpt_dir, "epoch_*")
    kept = (
        f"the last finite checkpoint is {finite[-1]} (resume={stage_dir} continues from it)"
        if finite
        else "no checkpoint was written before it"
    )
    return (
        f"stage {name} {ex}; nothing after it was saved, {kept}. Lower optimizer.lr or set "
        "train.clip_grad_norm; callbacks.stop_on_divergence=false trains on regardless"
    )


def _tag_batching(stage: PreparedStage, run: TrackedRun) -> None:
    cfg = stage.cfg
    run.set_tags(
        {
            "batch.per_worker": worker_batch_size(cfg),
            "batch.global": global_batch_size(cfg),
            "batch.workers": cfg.parallel.workers,
            "batch.steps_per_epoch": stage.steps_per_epoch,
        }
    )


def _fit(stage: PreparedStage, record: EventRecord, hooks: StageHooks) -> None:
    if stage.resumed_from is not None:
        load_hooks_state(stage.resumed_from, hooks.user)
    try:
        fit(stage.parts, stage.train_data, stage.spec.epochs, hooks.ordered, stage.start_epoch)
    except TrainingDiverged as ex:
        spec = stage.spec
        raise DivergedError(
            diverged_message(spec.name, ex, stage.ckpt_dir, spec.stage_dir)
        ) from None


def _exported(final: dict, ema_ranked: bool) -> dict:
    """The metrics of the weights the stage exports: the EMA ones (named without `_ema`) when
    they are ranked, else the raw ones."""
    if ema_ranked:
        return {k[:-4]: v for k, v in final.items() if k.endswith("_ema")}
    return {k: v for k, v in final.items() if not k.endswith("_ema")}


def plan_line(stage: PreparedStage, batching: str) -> str:
    """What the stage will train; a resume of a stage that trained all its epochs says there
    is nothing left (it read "epochs 2..1" before): its weights are only evaluated and exported."""
    spec = stage.spec
    if stage.start_epoch >= spec.epochs:
        return (
            f"stage {spec.name}: nothing left to train: {stage.resumed_from} is at epoch "
            f"{stage.start_epoch} of its {spec.epochs} (a larger epochs= trains on); its "
            "weights are evaluated and exported again"
        )
    return (
        f"stage {spec.name}: epochs {stage.start_epoch + 1}..{spec.epochs} x "
        f"{stage.steps_per_epoch} steps; {batching}"
    )


def train(stage: PreparedStage, run: TrackedRun) -> StageResult:
    """Train up to the spec's epochs (or until a hook stops it), evaluate, export `final.ckpt`,
    report to the run."""
    cfg, spec = stage.cfg, stage.spec
    batching = describe_batching(cfg, spec.epochs, stage.steps_per_epoch, spec.max_steps)
    log.info("%s", plan_line(stage, batching))
    if stage.worker.is_main:
        _tag_batching(stage, run)
        record_data(run, stage.data)
    record = EventRecord(spec.epochs, stage.steps_per_epoch, stage.start_epoch, stage.start_batches)
    hooks = stage_hooks(stage, record, run)
    _fit(stage, record, hooks)
    latest = record.latest_eval()
    final = latest[1] if latest is not None else hooks.evaluator.evaluate()
    last_epoch = latest[0] if latest is not None else spec.epochs  # a hook may stop early
    ema_ranked = cfg.train.ema.eval_with is EvalWith.ema
    last_step = last_epoch * stage.steps_per_epoch
    weights, end = _export(stage, run, ema_ranked, _exported(final, ema_ranked), last_step)
    cost = hooks.cost.cost()
    if stage.worker.is_main:
        for path in save_predictions(spec.stage_dir, end):
            run.log_artifact(path, checksum=True)
        spent = cost.metrics()
        if last_epoch in hooks.cost.by_epoch:  # its epoch's end put cost/passes at this step
            spent.pop("cost/passes")
        run.log_metrics({**end.metrics(), **spent}, last_step)
        speed = hooks.throughput.mean  # NaN when no step ran: not a measurement
        run.log_metrics(
            {"final/images_per_sec": speed} if math.isfinite(speed) else {}, last_step, flush=True
        )
        run.log_artifact(weights, "checkpoints", checksum=True)
    return StageResult(
        spec.name,
        end.val,
        weights,
        hooks.throughput.mean,
        with_passes(record.evals, hooks.cost.by_epoch),
        batching,
        end.val_correct,
        run.run_id,
        spec.stage_dir,
        cost=cost.metrics(),
        test_metrics=end.test,
        test_correct=end.test_correct,
    )


def _export(
    stage: PreparedStage, run: TrackedRun, ema_ranked: bool, val: dict, last_step: int
) -> tuple[Path, Ended]:
    """`final.<format>` (and `final_ema.<format>` when EMA is kept but not ranked), the exported
    weights measured on validation and test (`val`: their last validation metrics), and (rank
    0) the packaged model on the run."""
    parts, fmt = stage.parts, checkpoint_format(stage.cfg)
    swapped = parts.ema_swap if ema_ranked and parts.ema_swap is not None else nullcontext
    with swapped():
        weights = save_atomic(parts.network, stage.ckpt_dir / f"final.{fmt}")
        end = ended(parts.model, val, stage.val_data, stage.test_data)
        if stage.worker.is_main:
            record_model(
                stage.cfg,
                run,
                parts.network,
                weights,
                stage.test_data,
                stage.spec.stage_dir,
                last_step,
            )
    if parts.ema_swap is not None and not ema_ranked:
        with parts.ema_swap():
            save_atomic(parts.network, stage.ckpt_dir / f"final_ema.{fmt}")
    return weights, end
