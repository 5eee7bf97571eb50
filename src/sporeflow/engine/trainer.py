"""One stage of training: dataset -> network -> loss -> optimizer -> Model.train -> eval -> files.

A stage receives a validated plain config and an MLflow run; it never imports Hydra.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from mindspore import Model, nn
from omegaconf import DictConfig

from sporeflow.checkpoints import save_atomic
from sporeflow.components import build_dataset, build_loss, build_model, build_optimizer
from sporeflow.engine.callbacks import (CheckpointEachEpoch, EvalEachEpoch, ProgressBar, StepMetrics,
                                        Throughput)
from sporeflow.errors import DataError
from sporeflow.tracking import TrackedRun

log = logging.getLogger(__name__)


@dataclass
class StageResult:
    name: str
    metrics: dict                      # final eval metrics: acc, loss
    checkpoint: Path                   # network weights after the stage
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


def train_stage(name: str, cfg: DictConfig, out_dir: Path, run: TrackedRun,
                shard: Shard = Shard()) -> StageResult:
    """Train `cfg.epochs` epochs and evaluate; checkpoints go to `out_dir/checkpoints`."""
    data = build_dataset(cfg)
    train_data = data.create("train", **shard.dataset_args())
    eval_data = data.create("test")
    steps_per_epoch = train_data.get_dataset_size()
    if steps_per_epoch == 0:
        raise DataError(f"the training split of {cfg.dataset._target_} yields no batch of "
                        f"{cfg.dataset.batch_size} (drop_remainder={getattr(data, 'drop_remainder', False)})")

    network = build_model(cfg)
    loss_fn = build_loss(cfg)
    optimizer = build_optimizer(cfg, network.trainable_params())
    model = Model(network, loss_fn=loss_fn, optimizer=optimizer,
                  metrics={"acc": nn.Accuracy(), "loss": nn.Loss()})

    log.info("stage %s: %d epochs x %d steps of batch %d", name, cfg.epochs, steps_per_epoch,
             cfg.dataset.batch_size)
    throughput = Throughput(cfg.dataset.batch_size, run if shard.is_main else None)
    callbacks = [throughput]
    progress = None
    if shard.is_main:
        if cfg.callbacks.progress_bar:
            progress = ProgressBar(name, cfg.epochs, steps_per_epoch)
            callbacks.append(progress)
        callbacks.append(StepMetrics(run, cfg.callbacks.log_every_n_steps))
    evaluator = EvalEachEpoch(model, eval_data, cfg.epochs, cfg.callbacks.eval_every_n_epochs,
                              run if shard.is_main else None, progress)
    callbacks.append(evaluator)
    ckpt_dir = out_dir / "checkpoints"
    callbacks.append(CheckpointEachEpoch(ckpt_dir, cfg.callbacks.checkpoint.every_n_epochs,
                                         cfg.callbacks.checkpoint.keep_last))

    model.train(cfg.epochs, train_data, callbacks=callbacks, dataset_sink_mode=False)

    final = evaluator.history[-1][1]
    weights = save_atomic(network, ckpt_dir / "final.ckpt")
    if shard.is_main:
        run.log_metrics({f"final/{k}": v for k, v in final.items()}, cfg.epochs * steps_per_epoch)
        run.log_metrics({"final/images_per_sec": throughput.mean}, cfg.epochs * steps_per_epoch, flush=True)
        run.log_artifact(weights, "checkpoints")
    return StageResult(name, final, weights, throughput.mean, evaluator.history)
