"""What a stage records besides metrics: the data it saw (MLflow dataset inputs) and its final
network as a model others can load (sporeflow.serving), both through the run's journal."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import DictConfig

from sporeflow.config.facts import container
from sporeflow.config.schema import ParallelMode, RunConfig
from sporeflow.core.names import SELECTION_TAG
from sporeflow.serving.package import EXAMPLE, package_model
from sporeflow.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)
MODEL_DIR = "model"
CONTEXTS = {"train": "training", "val": "validation", "test": "evaluation"}


def record_data(run: TrackedRun, data) -> None:
    """Each split as a dataset input of the run (name, where from, files to hash, images).
    With no validation split (dataset.val_split=0) none is logged under `validation`: the
    choices read the test input, which the stage says and tags (data.selection_split)."""
    if data.selection_split != "val":
        run.set_tags({SELECTION_TAG: data.selection_split})
    for split, context in CONTEXTS.items():
        if split == "val" and data.selection_split != "val":
            continue
        source = data.source(split)
        run.log_dataset(
            f"{source.name}-{split}",
            source.location,
            [str(f) for f in source.files],
            source.selection,
            data.num_rows(split),
            context,
        )


def model_logged(run: RunConfig) -> bool:
    """Whether a stage logs its network: full weights on this process (not sharded)."""
    return run.tracking.log_model and run.parallel.mode in (
        ParallelMode.standalone,
        ParallelMode.data,
    )


def record_model(
    cfg: DictConfig,
    config: RunConfig,
    run: TrackedRun,
    network,
    weights: Path,
    eval_data,
    stage_dir: Path,
    step: int,
) -> None:
    """Package the final network in `<stage dir>/model` and journal it as the run's model:
    with its component node (`model` of `cfg`, what serving builds it from) and, from the typed
    `config`, whether it is logged and its classes."""
    if not model_logged(config) or run.run_id is None:
        return
    images, _ = next(eval_data.create_tuple_iterator(num_epochs=1))
    packaged = package_model(
        network,
        container(cfg.model),
        weights,
        images.asnumpy(),
        config.dataset["num_classes"],
        Path(stage_dir) / MODEL_DIR,
    )
    run.log_model(
        packaged.path, packaged.path / EXAMPLE, packaged.input_shape, packaged.num_classes, step
    )
