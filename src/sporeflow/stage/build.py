"""What a stage builds from its config: network (shard strategies, start weights, AMP), loss,
optimizer and the train cell - a plain mindspore.Model, sporeflow's TrainStep, or the stage-2
DimReduceStep. The engine receives the result (`StageParts`) and only fits it."""

from __future__ import annotations

from functools import partial

from mindspore import Model, nn
from omegaconf import DictConfig

from sporeflow.config.components import (
    build_loss,
    build_model,
    build_optimizer,
    build_train_loss,
    mixing,
)
from sporeflow.config.schema import LossScaleManager, ParallelMode, RunConfig, TrainStepConfig
from sporeflow.config.strategies import apply_strategies
from sporeflow.dim_reduce.step import DimReduceStep
from sporeflow.engine import graph_pool
from sporeflow.engine.loop import StageParts
from sporeflow.engine.precision import apply_amp
from sporeflow.engine.predictions import eval_metrics
from sporeflow.engine.train_step import TrainStep, data_parallel_reducer, ema_weights_in
from sporeflow.stage import fine_tune
from sporeflow.stage.spec import StageSpec
from sporeflow.storage.checkpoints import load_weights


def needs_train_step(step_cfg: TrainStepConfig) -> bool:
    """False when every `train.*` feature is off: then a plain mindspore.Model(net, loss, opt)."""
    return (
        step_cfg.loss_scale != 1.0
        or step_cfg.loss_scale_manager is LossScaleManager.dynamic
        or step_cfg.clip_grad_norm > 0
        or step_cfg.accumulation_steps > 1
        or step_cfg.ema.enabled
    )


def train_step_from_config(
    network: nn.Cell, loss_fn: nn.Cell, optimizer: nn.Optimizer, step_cfg: TrainStepConfig
) -> TrainStep:
    ema = step_cfg.ema
    return TrainStep(
        nn.WithLossCell(network, loss_fn),
        optimizer,
        loss_scale=step_cfg.loss_scale,
        clip_grad_norm=step_cfg.clip_grad_norm,
        accumulation_steps=step_cfg.accumulation_steps,
        ema_decay=ema.decay if ema.enabled else 0.0,
        ema_warmup=ema.warmup,
        grad_reducer=data_parallel_reducer(optimizer.parameters),
        dynamic_scale=step_cfg.loss_scale_manager is LossScaleManager.dynamic,
        scale_factor=step_cfg.loss_scale_factor,
        scale_window=step_cfg.loss_scale_window,
    )


def model_around(
    cell: nn.Cell, network: nn.Cell, eval_loss: nn.Cell, reuse: bool, **train_parts
) -> Model:
    """A Model whose train network is `cell` (with `train_parts`: its loss_fn and optimizer)
    and eval network the plain one, shared by every stage of that network (graph_pool)."""
    return Model(
        cell,
        eval_network=graph_pool.eval_cell(network, eval_loss, reuse),
        metrics=eval_metrics(),
        eval_indexes=[0, 1, 2],
        **train_parts,
    )


def build_stage_parts(
    cfg: DictConfig, run: RunConfig, spec: StageSpec, steps_per_epoch: int
) -> StageParts:
    """The network (shard strategies, start weights, AMP), loss, optimizer (the spec's epochs
    and rate) and train cell of one stage; an earlier stage's compiled parts of the same graph
    with these values in them, when there are (engine.graph_pool). The components are built
    from `cfg`; their settings (train step, AMP, shards, stage 2's) are read from `run`, its
    typed twin (job.plan's `plan.run`)."""
    reuse = run.runtime.reuse_graphs
    return graph_pool.reused(_built_parts(cfg, run, spec, steps_per_epoch), reuse)


def _built_parts(
    cfg: DictConfig, run: RunConfig, spec: StageSpec, steps_per_epoch: int
) -> StageParts:
    train, parallel = run.train, run.parallel
    network = build_model(cfg)
    if parallel.mode is ParallelMode.semi_auto:
        apply_strategies(network, parallel.shard)
    if spec.init_weights is not None:
        load_weights(network, spec.init_weights)
    if spec.fine_tune_from is not None:
        fine_tune.start_from(network, spec.fine_tune_from)
    fine_tune.freeze(network, train.freeze)
    network = apply_amp(network, train.amp_level.value, train.keep_batchnorm_fp32)
    reuse = run.runtime.reuse_graphs
    network = graph_pool.shared_network(network, reuse)
    loss_fn = build_loss(cfg)  # evaluation's (integer labels)
    train_loss = build_train_loss(cfg)  # the step's (mixed batches: soft labels)
    if spec.basis is not None:
        b = run.boost
        step = DimReduceStep(
            nn.WithLossCell(network, train_loss),
            network.trainable_params(),
            spec.basis,
            rho=b.rho,
            gamma=b.gamma,
            alpha=b.alpha,
            sigma=b.sigma,
            weight_decay=b.weight_decay,
        )
        forwards = step.trial_forwards  # the line search's trial forwards, restored on resume
        model = model_around(step, network, loss_fn, reuse)
        return StageParts(network, model, (step,), extra_forwards=lambda: float(forwards.asnumpy()))
    optimizer = build_optimizer(
        cfg, network.trainable_params(), steps_per_epoch, spec.epochs, spec.lr, spec.schedule
    )
    if not needs_train_step(train) and not mixing(cfg):
        model = model_around(network, network, loss_fn, reuse, loss_fn=loss_fn, optimizer=optimizer)
        return StageParts(network, model, (network, optimizer))
    step = train_step_from_config(network, train_loss, optimizer, train)
    swap = partial(ema_weights_in, step) if train.ema.enabled else None
    return StageParts(network, model_around(step, network, loss_fn, reuse), (step,), swap)
