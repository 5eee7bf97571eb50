"""A source's final weights evaluated again (eval.py): one pass over a split in its order and
as the network is evaluated (no augmentation), the outputs kept, and from them the accuracy
(top-1, top-5, per class), the confusion matrix and the loss, recorded in an MLflow run of
stage `eval` beside the files. Classes are named by the model's own class names (stored with its
weights when it trained: storage.checkpoints.class_names_entry): per-class metrics are
`acc_class_<name>`, the confusion matrix is headed by the names."""

from __future__ import annotations

import csv
import io
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from mindspore import Model
from omegaconf import DictConfig

from sporeflow.config.components import build_dataset, build_loss, build_model
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.engine.predictions import eval_metrics, evaluated
from sporeflow.report.classification import classification_metrics, confusion_matrix
from sporeflow.stage.source import Source
from sporeflow.storage.checkpoints import load_weights, stored_class_names
from sporeflow.storage.files import atomic_path, write_text_atomic
from sporeflow.tracking.tracker import TrackedRun

log = logging.getLogger(__name__)
TICKED = 30  # classes whose names the confusion picture writes on its axes


def loaded_network(cfg: DictConfig, source: Source):
    """`cfg`'s network holding `source`'s weights; ConfigError naming `source=` when they are
    not this network's (another network, or a data set with another number of classes)."""
    network = build_model(cfg)
    try:
        load_weights(network, source.weights)
    except CheckpointError as ex:
        raise ConfigError(f"source={source.name}: {ex} (model={cfg.model._target_})") from None
    return network


def model_class_names(source: Source, dataset) -> list[str] | None:
    """The class names `source`'s weights were trained with (label order), or None where its
    data set names none. A checkpoint written before they were stored: the data set's names as
    its files are now (what eval and predict named them by before), said in one line."""
    try:
        stored = stored_class_names(source.weights)
    except CheckpointError as ex:
        raise ConfigError(f"source={source.name}: {ex}") from None
    if stored is not None:
        return stored
    current = dataset.class_names()
    if current:
        log.warning(
            "source=%s: its weights hold no class names (saved before sporeflow stored them): "
            "classes are named by the data set's folders as they are now (%s); if a class "
            "folder was added or removed since it trained, the names are wrong",
            source.name,
            ", ".join(current),
        )
    return current


def labelled_by_model(dataset, names: Sequence[str] | None):
    """`dataset` labelling its splits by the model's class names, where it has any."""
    if names:
        dataset.label_by(names)
    return dataset


def evaluate_source(
    cfg: DictConfig,
    network,
    split: str,
    out_dir: Path,
    run: TrackedRun,
    dataset=None,
    class_names: Sequence[str] | None = None,
) -> dict[str, float]:
    """`network` on `split` of `dataset` (default: `cfg`'s data set): the metrics (`acc`,
    `acc_top5`, `acc_class_<class name>`, `loss`), logged as `<split>/...` (`test/acc`) with
    the files; classes named by `class_names` (the model's), else by their numbers."""
    dataset = build_dataset(cfg) if dataset is None else dataset
    batches = dataset.create(split, shuffle=False, augment=False)
    model = Model(network, loss_fn=build_loss(cfg), metrics=eval_metrics())
    logits, labels, measured = evaluated(model, batches)  # one pass: the loss as Model.eval's
    metrics = {**classification_metrics(logits, labels, class_names), "loss": measured["loss"]}
    run.log_metrics({f"{split}/{k}": v for k, v in metrics.items()}, 0, flush=True)
    for path in _save_outputs(out_dir, logits, labels, class_names):
        run.log_artifact(path)
    return metrics


def _save_outputs(
    out_dir: Path, logits: np.ndarray, labels: np.ndarray, class_names: Sequence[str] | None
) -> list[Path]:
    """logits.npy and labels.npy (image by image, in the split's order), predictions.npy
    (whether each image's top-1 class is its label, as a training stage keeps it) and the
    confusion matrix as a table and a picture, headed by the class names."""
    predicted = logits.argmax(axis=1)
    counts = confusion_matrix(predicted, labels, logits.shape[1])
    written = []
    outputs = {"logits.npy": logits, "labels.npy": labels, "predictions.npy": predicted == labels}
    for name, array in outputs.items():
        with atomic_path(out_dir / name) as tmp:
            np.save(tmp, array)
        written.append(out_dir / name)
    heads = class_headings(class_names, len(counts))
    table = io.StringIO()
    rows = csv.writer(table, lineterminator="\n")
    rows.writerow(["true\\predicted", *heads])
    rows.writerows([head, *row] for head, row in zip(heads, counts.tolist(), strict=True))
    written.append(write_text_atomic(out_dir / "confusion_matrix.csv", table.getvalue()))
    written.append(_plot_confusion(counts, heads, out_dir / "confusion_matrix.png"))
    return written


def class_headings(class_names: Sequence[str] | None, count: int) -> list[str]:
    """Each class's heading: its name, or its number where the model has no names (or fewer
    than its outputs)."""
    names = list(class_names or [])
    return [names[c] if c < len(names) else str(c) for c in range(count)]


def _plot_confusion(counts: np.ndarray, heads: list[str], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.5))
    shown = ax.imshow(counts, cmap="Blues")
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"confusion matrix ({int(counts.sum())} images)")
    if len(heads) <= TICKED:
        ax.set_xticks(range(len(heads)), heads, rotation=90)
        ax.set_yticks(range(len(heads)), heads)
    fig.colorbar(shown, ax=ax)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
