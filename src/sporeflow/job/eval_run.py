"""A source's final weights evaluated again (eval.py): one pass over a split in its order and
as the network is evaluated (no augmentation), the outputs kept, and from them the accuracy
(top-1, top-5, per class), the confusion matrix and the loss, recorded in an MLflow run of
stage `eval` beside the files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from mindspore import Model
from omegaconf import DictConfig

from sporeflow.config.components import build_dataset, build_loss, build_model
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.engine.predictions import eval_metrics, evaluated
from sporeflow.report.classification import classification_metrics, confusion_matrix
from sporeflow.stage.source import Source
from sporeflow.storage.checkpoints import load_weights
from sporeflow.storage.files import atomic_path, write_text_atomic
from sporeflow.tracking.tracker import TrackedRun


def loaded_network(cfg: DictConfig, source: Source):
    """`cfg`'s network holding `source`'s weights; ConfigError naming `source=` when they are
    not this network's (another network, or a data set with another number of classes)."""
    network = build_model(cfg)
    try:
        load_weights(network, source.weights)
    except CheckpointError as ex:
        raise ConfigError(f"source={source.name}: {ex} (model={cfg.model._target_})") from None
    return network


def evaluate_source(
    cfg: DictConfig, network, split: str, out_dir: Path, run: TrackedRun
) -> dict[str, float]:
    """`network` on `split` of `cfg`'s data set: the metrics (`acc`, `acc_top5`,
    `acc_class_<c>`, `loss`), logged as `<split>/...` (`test/acc`) with the files."""
    batches = build_dataset(cfg).create(split, shuffle=False, augment=False)
    model = Model(network, loss_fn=build_loss(cfg), metrics=eval_metrics())
    logits, labels, measured = evaluated(model, batches)  # one pass: the loss as Model.eval's
    metrics = {**classification_metrics(logits, labels), "loss": measured["loss"]}
    run.log_metrics({f"{split}/{k}": v for k, v in metrics.items()}, 0, flush=True)
    for path in _save_outputs(out_dir, logits, labels):
        run.log_artifact(path)
    return metrics


def _save_outputs(out_dir: Path, logits: np.ndarray, labels: np.ndarray) -> list[Path]:
    """logits.npy and labels.npy (image by image, in the split's order), predictions.npy
    (whether each image's top-1 class is its label, as a training stage keeps it) and the
    confusion matrix as a table and a picture."""
    predicted = logits.argmax(axis=1)
    counts = confusion_matrix(predicted, labels, logits.shape[1])
    written = []
    outputs = {"logits.npy": logits, "labels.npy": labels, "predictions.npy": predicted == labels}
    for name, array in outputs.items():
        with atomic_path(out_dir / name) as tmp:
            np.save(tmp, array)
        written.append(out_dir / name)
    header = "true\\predicted," + ",".join(str(c) for c in range(len(counts)))
    rows = [f"{c}," + ",".join(str(n) for n in row) for c, row in enumerate(counts)]
    written.append(
        write_text_atomic(out_dir / "confusion_matrix.csv", "\n".join([header, *rows]) + "\n")
    )
    written.append(_plot_confusion(counts, out_dir / "confusion_matrix.png"))
    return written


def _plot_confusion(counts: np.ndarray, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 4.5))
    shown = ax.imshow(counts, cmap="Blues")
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"confusion matrix ({int(counts.sum())} images)")
    fig.colorbar(shown, ax=ax)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
