"""What a stage leaves behind for the stages and the comparison after it: its final metrics,
weights, per-epoch evaluations and, per eval image, whether it was right (`predictions.npy`:
a reused stage brings its file along)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

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


def save_predictions(stage_dir: Path, correct: np.ndarray) -> Path:
    """`<stage dir>/predictions.npy`: right/wrong per eval image (a sweep decides on them)."""
    path = Path(stage_dir) / PREDICTIONS
    with atomic_path(path) as tmp:
        np.save(tmp, correct.astype(bool))
    return path


def load_predictions(stage_dir: Path) -> np.ndarray | None:
    path = Path(stage_dir) / PREDICTIONS
    return np.load(path, allow_pickle=False) if path.is_file() else None
