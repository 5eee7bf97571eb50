"""One stage of training: dataset -> network -> loss -> optimizer -> Model.train -> eval -> files.

A stage receives a validated plain config and an MLflow run; it never imports Hydra.
With every `train.*` feature off it trains a plain `mindspore.Model(net, loss, optimizer)`;
otherwise the Model wraps sporeflow's TrainStep. A resumed stage restores the newest complete
checkpoint (weights, optimizer state, EMA, step) and continues at the next epoch.
"""
from __future__ import annotations

import logging
from contextlib import nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from mindspore import Model, nn
from omegaconf import DictConfig

from sporeflow.checkpoints import newest_complete_checkpoint, restore_exact, save_atomic
from sporeflow.components import build_dataset, build_loss, build_model, build_optimizer
from sporeflow.engine.callbacks import (BestCheckpoints, CheckpointEachEpoch, EvalEachEpoch, ProgressBar,
                                        StepMetrics, Throughput)
from sporeflow.engine.train_step import build_train_step, ema_weights_in, needs_train_step
from sporeflow.errors import DataError
from sporeflow.tracking import TrackedRun

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    name: str
    metrics: dict                      # final eval metrics of the exported weights: acc, loss
    checkpoint: Path                   # network weights after the stage (EMA if eval_with=ema)
    images_per_sec: float
    history: list = field(default_factory=list)  # [(epoch, {metric: value})]


@dataclass
class Shard:
    """This process's place in the data-parallel world (rank 0 of 1 when stand-alone)."""
    rank: int = 0
    size: int = 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def dataset_args(self) -> dict:
        return {"num_shards": self.size, "shard_id": self.rank} if self.size > 1 else {}


@dataclass
class Training:
    """The built pieces of a stage: what callbacks, resume and export need to reach."""
    network: nn.Cell
    model: Model
    state_cells: tuple                 # every cell whose parameters a full checkpoint holds
    ema_swap: object = None            # callable -> context manager, when EMA is on


def build_training(cfg: DictConfig) -> Training:
    network = build_model(cfg)
    loss_fn = build_loss(cfg)
    optimizer = build_optimizer(cfg, network.trainable_params())
    metrics = {"acc": nn.Accuracy(), "loss": nn.Loss()}
    if not needs_train_step(cfg.train):
        return Training(network, Model(network, loss_fn=loss_fn, optimizer=optimizer, metrics=metrics),
                        (network, optimizer))
    step = build_train_step(network, loss_fn, optimizer, cfg.train)
    model = Model(step, eval_network=nn.WithEvalCell(network, loss_fn), metrics=metrics,
                  eval_indexes=[0, 1, 2])
    swap = partial(ema_weights_in, step) if cfg.train.ema.enabled else None
    return Training(network, model, (step,), swap)


def train_stage(name: str, cfg: DictConfig, out_dir: Path, run: TrackedRun,
                shard: Shard = Shard(), resume: bool = False) -> StageResult:
    """Train up to `cfg.epochs` epochs and evaluate; checkpoints go to `out_dir/checkpoints`."""
    ckpt_dir = out_dir / "checkpoints"
    training = build_training(cfg)
    start_epoch = 0
    if resume:
        path, state = newest_complete_checkpoint(ckpt_dir)
        restore_exact(state, *training.state_cells)
        start_epoch = int(state["epoch_num"].asnumpy())
        log.info("resuming %s from %s (epoch %d)", name, path, start_epoch)

    data = build_dataset(cfg)
    train_data = data.create("train", seed=cfg.seed, start_epoch=start_epoch, **shard.dataset_args())
    eval_data = data.create("test")
    steps_per_epoch = train_data.get_dataset_size()
    if steps_per_epoch == 0:
        raise DataError(f"the training split of {cfg.dataset._target_} yields no batch of "
                        f"{cfg.dataset.batch_size} (drop_remainder={getattr(data, 'drop_remainder', False)})")
    log.info("stage %s: epochs %d..%d x %d steps of batch %d", name, start_epoch + 1, cfg.epochs,
             steps_per_epoch, cfg.dataset.batch_size)

    main_run = run if shard.is_main else None
    ema_ranked = cfg.train.ema.eval_with.value == "ema"
    throughput = Throughput(cfg.dataset.batch_size, main_run)
    progress = ProgressBar(name, cfg.epochs - start_epoch, steps_per_epoch) \
        if shard.is_main and cfg.callbacks.progress_bar else None
    evaluator = EvalEachEpoch(training.model, eval_data, cfg.epochs, cfg.callbacks.eval_every_n_epochs,
                              main_run, progress, training.ema_swap)
    callbacks = [throughput, progress, StepMetrics(run, cfg.callbacks.log_every_n_steps) if main_run else None,
                 evaluator,
                 CheckpointEachEpoch(ckpt_dir, cfg.callbacks.checkpoint.every_n_epochs,
                                     cfg.callbacks.checkpoint.keep_last)]
    best = cfg.callbacks.best
    if best.keep:
        callbacks.append(BestCheckpoints(evaluator, training.network, ckpt_dir,
                                         best.monitor + ("_ema" if ema_ranked else ""), best.mode.value,
                                         best.keep, training.ema_swap if ema_ranked else None))
    callbacks = [cb for cb in callbacks if cb is not None]
    for cb in callbacks:
        if hasattr(cb, "step_offset"):
            cb.step_offset = start_epoch * steps_per_epoch

    if start_epoch < cfg.epochs:
        training.model.train(cfg.epochs, train_data, callbacks=callbacks, dataset_sink_mode=False,
                             initial_epoch=start_epoch)
    final = evaluator.history[-1][1] if evaluator.history else evaluator.evaluate()
    exported = {k[:-4]: v for k, v in final.items() if k.endswith("_ema")} if ema_ranked else \
        {k: v for k, v in final.items() if not k.endswith("_ema")}
    swap = training.ema_swap if ema_ranked else nullcontext
    with swap():
        weights = save_atomic(training.network, ckpt_dir / "final.ckpt")
    if training.ema_swap is not None and not ema_ranked:
        with training.ema_swap():
            save_atomic(training.network, ckpt_dir / "final_ema.ckpt")
    if shard.is_main:
        last_step = cfg.epochs * steps_per_epoch
        run.log_metrics({f"final/{k}": v for k, v in exported.items()}, last_step)
        run.log_metrics({"final/images_per_sec": throughput.mean}, last_step, flush=True)
        run.log_artifact(weights, "checkpoints")
    return StageResult(name, exported, weights, throughput.mean, evaluator.history)
