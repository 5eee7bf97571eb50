"""A stage with no training: given weights evaluated (the snapshot-mean baseline), with
BatchNorm statistics recomputed on training batches when the network has BatchNorm."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
from mindspore import Tensor
from omegaconf import DictConfig

from sporeflow.config.components import build_loss, build_model
from sporeflow.config.schema import RunConfig
from sporeflow.engine import graph_pool
from sporeflow.engine.batchnorm import recompute_batchnorm
from sporeflow.stage.build import model_around
from sporeflow.stage.result import StageResult, ended, save_predictions
from sporeflow.stage.spec import StageSpec
from sporeflow.stage.writer import StageWriter
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    class_names_entry,
    load_weights,
    save_atomic,
)
from sporeflow.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)


def network_with(cfg: DictConfig, base: Path, weights: dict):
    """The config's network holding `base`'s weights, its trainable ones replaced by `weights`
    (name -> array): BatchNorm statistics and other non-trainables stay `base`'s."""
    network = build_model(cfg)
    load_weights(network, base)
    for param in network.trainable_params():
        param.set_data(Tensor(np.asarray(weights[param.name], dtype=np.float32)))
    return network


def evaluate_weights(
    cfg: DictConfig, config: RunConfig, spec: StageSpec, weights: dict, data, run: TrackedRun
) -> StageResult:
    """`spec.init_weights` overlaid with `weights` (name -> array), evaluated on `data`'s
    validation split (its metrics) and test split (reported); final weights, predictions and
    the model kept like a trained stage's. Components built from `cfg`, settings read from
    `config` (its typed twin)."""
    if spec.init_weights is None:
        raise ValueError(f"{spec.name}: an evaluated stage needs the weights it starts from")
    reuse = config.runtime.reuse_graphs
    network = graph_pool.shared_network(network_with(cfg, spec.init_weights, weights), reuse)
    loss_fn = build_loss(cfg)
    model = model_around(network, network, loss_fn, reuse, loss_fn=loss_fn)
    if recompute_batchnorm(network, data.create("train", seed=config.seed, mix=False)):
        log.info("%s: BatchNorm statistics recomputed on the training split", spec.name)
    val_data, test_data = data.create("val"), data.create("test")
    result = {k: float(v) for k, v in model.eval(val_data, dataset_sink_mode=False).items()}
    final = checkpoint_dir(spec.stage_dir) / f"final.{config.callbacks.checkpoint.format.value}"
    path = save_atomic(network, final, class_names_entry(data.class_names()))
    end = ended(model, result, val_data, test_data)
    writer = StageWriter(run)  # the stage's one road to its run, as a trained stage's
    writer.files(save_predictions(spec.stage_dir, end))
    writer.data(data)
    writer.model(cfg, config, network, path, test_data, spec.stage_dir, 0)
    writer.metrics({f"val/{k}": v for k, v in result.items()}, 0)
    writer.metrics(end.metrics(), 0, flush=True)
    return StageResult(
        spec.name,
        end.val,
        path,
        float("nan"),
        [(0, result)],
        val_correct=end.val_correct,
        run_id=run.run_id,
        stage_dir=spec.stage_dir,
        test_metrics=end.test,
        test_correct=end.test_correct,
    )
