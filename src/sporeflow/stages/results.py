"""What a stage leaves behind for the stages and the comparison after it: its final metrics,
weights, per-epoch evaluations and, per eval image, whether it was right (`predictions.npy`:
a reused stage brings its file along)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sporeflow.engine.predictions import logits_and_labels
from sporeflow.report.classification import classification_metrics
from sporeflow.storage.files import atomic_path

PREDICTIONS = "predictions.npy"


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
    stage_dir: Path | None = None  # where its files are (a reused run's dir or fetched copy)
    reused_from: str | None = None  # the MLflow run it was reused from, when not trained here


def judged(model, eval_data) -> tuple[np.ndarray, dict[str, float]]:
    """A stage's exported weights (in `model`, a mindspore.Model) on the eval split, one pass:
    right/wrong per image (what a paired comparison needs) and top-5 and per-class accuracy
    (`acc_top5`, `acc_class_<c>`)."""
    logits, labels = logits_and_labels(model, eval_data)
    if not len(labels):
        return np.zeros(0, bool), {}
    found = classification_metrics(logits, labels)
    found.pop("acc")  # the stage's evaluation reports it (with the loss)
    return logits.argmax(axis=1) == labels, found


def end_metrics(evaluated: dict, classified: dict) -> dict[str, float]:
    """What a stage's run records at its end: `final/` the exported weights' evaluation, top-5
    and per-class accuracy; `eval/acc_top5` beside the epochs' `eval/acc`."""
    ended = {f"final/{k}": v for k, v in {**evaluated, **classified}.items()}
    if "acc_top5" in classified:
        ended["eval/acc_top5"] = classified["acc_top5"]
    return ended


def save_predictions(stage_dir: Path, correct: np.ndarray) -> Path:
    """`<stage dir>/predictions.npy`: right/wrong per eval image (a sweep decides on them)."""
    path = Path(stage_dir) / PREDICTIONS
    with atomic_path(path) as tmp:
        np.save(tmp, correct.astype(bool))
    return path


def load_predictions(stage_dir: Path) -> np.ndarray | None:
    path = Path(stage_dir) / PREDICTIONS
    return np.load(path, allow_pickle=False) if path.is_file() else None
