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

import numpy as np
from mindspore import Model, Tensor, nn
from omegaconf import DictConfig

from sporeflow.checkpoints import load_checkpoint_file, newest_complete_checkpoint, restore_exact, save_atomic
from sporeflow.dim_reduce.snapshots import SnapshotCallback
from sporeflow.dim_reduce.step import DimReduceStep
from sporeflow.components import build_dataset, build_loss, build_model, build_optimizer
from sporeflow.engine.callbacks import (BestCheckpoints, CheckpointEachEpoch, EvalEachEpoch, ProgressBar,
                                        StepMetrics, Throughput)
from sporeflow.engine.precision import apply_amp
from sporeflow.engine.train_step import build_train_step, ema_weights_in, needs_train_step
from sporeflow.errors import DataError
from sporeflow.runtime import Shard
from sporeflow.strategies import apply_strategies
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
class StagePlan:
    """What distinguishes one stage of a pipeline from plain training."""
    init_weights: Path | None = None     # network weights to start from (stage 1's final.ckpt)
    basis: object = None                 # k x M PCA basis: train with DimReduceStep
    snapshot_dir: Path | None = None     # keep stage-1 weight snapshots here (boost.snapshot)


@dataclass
class Training:
    """The built pieces of a stage: what callbacks, resume and export need to reach."""
    network: nn.Cell
    model: Model
    state_cells: tuple                 # every cell whose parameters a full checkpoint holds
    ema_swap: object = None            # callable -> context manager, when EMA is on


def load_weights(network: nn.Cell, path: Path) -> None:
    """Network weights from a checkpoint, every parameter matched by its exact name."""
    restore_exact(load_checkpoint_file(path), network)


def build_training(cfg: DictConfig, plan: StagePlan = StagePlan(), steps_per_epoch: int | None = None) -> Training:
    network = build_model(cfg)
    if cfg.parallel.mode.value == "semi_auto":
        apply_strategies(network, cfg.parallel.shard)
    if plan.init_weights is not None:
        load_weights(network, plan.init_weights)
    network = apply_amp(network, cfg.train.amp_level.value, cfg.train.keep_batchnorm_fp32)
    loss_fn = build_loss(cfg)
    metrics = {"acc": nn.Accuracy(), "loss": nn.Loss()}
    if plan.basis is not None:
        b = cfg.boost
        step = DimReduceStep(nn.WithLossCell(network, loss_fn), network.trainable_params(), plan.basis,
                             rho=b.rho, gamma=b.gamma, alpha=b.alpha, sigma=b.sigma, weight_decay=b.weight_decay)
        model = Model(step, eval_network=nn.WithEvalCell(network, loss_fn), metrics=metrics, eval_indexes=[0, 1, 2])
        return Training(network, model, (step,))
    optimizer = build_optimizer(cfg, network.trainable_params(), steps_per_epoch)
    if not needs_train_step(cfg.train):
        return Training(network, Model(network, loss_fn=loss_fn, optimizer=optimizer, metrics=metrics),
                        (network, optimizer))
    step = build_train_step(network, loss_fn, optimizer, cfg.train)
    model = Model(step, eval_network=nn.WithEvalCell(network, loss_fn), metrics=metrics,
                  eval_indexes=[0, 1, 2])
    swap = partial(ema_weights_in, step) if cfg.train.ema.enabled else None
    return Training(network, model, (step,), swap)


def train_stage(name: str, cfg: DictConfig, out_dir: Path, run: TrackedRun,
                shard: Shard = Shard(), resume: bool = False, plan: StagePlan = StagePlan()) -> StageResult:
    """Train up to `cfg.epochs` epochs and evaluate; checkpoints go to `out_dir/checkpoints`
    (`checkpoints/rank_<r>` in a parallel job)."""
    ckpt_dir = out_dir / "checkpoints" if shard.size == 1 else out_dir / "checkpoints" / f"rank_{shard.rank}"
    start_epoch, state = 0, None
    if resume:
        path, state = newest_complete_checkpoint(ckpt_dir)
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
    training = build_training(cfg, plan, steps_per_epoch)
    if state is not None:
        restore_exact(state, *training.state_cells)

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
                                     cfg.callbacks.checkpoint.keep_last, cfg.parallel.integrated_save)]
    best = cfg.callbacks.best
    if best.keep:
        callbacks.append(BestCheckpoints(evaluator, training.network, ckpt_dir,
                                         best.monitor + ("_ema" if ema_ranked else ""), best.mode.value,
                                         best.keep, training.ema_swap if ema_ranked else None))
    if plan.snapshot_dir is not None:
        snap = cfg.boost.snapshot
        callbacks.insert(0, SnapshotCallback(training.network, plan.snapshot_dir, snap.start_epoch,
                                             snap.per_epoch, steps_per_epoch))
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


def evaluate_weights(name: str, cfg: DictConfig, weights: dict, base: Path, run: TrackedRun,
                     out_dir: Path) -> StageResult:
    """A stage with no training: `base` weights overlaid with `weights` (name -> array),
    BatchNorm statistics recomputed on training batches when the network has BatchNorm."""
    network = build_model(cfg)
    load_weights(network, base)
    for param in network.trainable_params():
        param.set_data(Tensor(np.asarray(weights[param.name], dtype=np.float32)))
    data = build_dataset(cfg)
    if recompute_batchnorm(network, data.create("train", seed=cfg.seed)):
        log.info("%s: BatchNorm statistics recomputed on the training split", name)
    model = Model(network, loss_fn=build_loss(cfg), metrics={"acc": nn.Accuracy(), "loss": nn.Loss()})
    result = {k: float(v) for k, v in model.eval(data.create("test"), dataset_sink_mode=False).items()}
    path = save_atomic(network, out_dir / "checkpoints" / "final.ckpt")
    run.log_metrics({f"final/{k}": v for k, v in result.items()}, 0, flush=True)
    run.log_metrics({f"eval/{k}": v for k, v in result.items()}, 0, flush=True)
    return StageResult(name, result, path, float("nan"), [(0, result)])


def recompute_batchnorm(network: nn.Cell, train_data, max_batches: int = 100) -> bool:
    """Re-estimate BatchNorm moving statistics for averaged weights: reset them, then forward
    passes in train mode (the layers' own momentum; after 100 batches at 0.9 the reset value
    weighs 0.9**100 ~ 3e-5)."""
    norms = [c for _, c in network.cells_and_names() if isinstance(c, nn.layer.normalization._BatchNorm)]
    if not norms:
        return False
    for bn in norms:
        bn.moving_mean.set_data(Tensor(np.zeros(bn.moving_mean.shape, np.float32)))
        bn.moving_variance.set_data(Tensor(np.ones(bn.moving_variance.shape, np.float32)))
    network.set_train(True)
    for i, (images, _) in enumerate(train_data.create_tuple_iterator(num_epochs=1)):
        if i >= max_batches:
            break
        network(images)
    network.set_train(False)
    return True
