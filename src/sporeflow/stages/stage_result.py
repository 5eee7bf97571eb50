"""What a stage leaves behind for the stages and the comparison after it: its final metrics,
weights, per-epoch evaluations and, per eval image, whether it was right (`predictions.npy`:
a reused stage brings its file along). A pipeline's finished stage also writes its result to
`stage_result.json` in its dir: a continued pipeline (a requeue, `resume=`) takes it from there
instead of training the stage again."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sporeflow.engine.predictions import logits_and_labels
from sporeflow.report.classification import classification_metrics
from sporeflow.storage.files import atomic_path, write_text_atomic

PREDICTIONS = "predictions.npy"
RESULT = "stage_result.json"


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
    cost: dict = field(default_factory=dict)  # what it spent, as its run records it (engine.cost)

    @property
    def files(self) -> Path:
        """Its dir, for a stage whose files are read next (stage 1's snapshots and basis)."""
        if self.stage_dir is None:
            raise ValueError(f"{self.name}: a result without its stage dir")
        return self.stage_dir


def with_passes(history: list, passes_by_epoch: dict[int, float]) -> list:
    """A stage's evaluations [(epoch, {metric: value})] with each one's cumulative cost in
    forward+backward passes (`passes`) where it is known: the accuracy-against-cost curve."""
    return [
        (
            epoch,
            {
                **evaluated,
                **({"passes": passes_by_epoch[epoch]} if epoch in passes_by_epoch else {}),
            },
        )
        for epoch, evaluated in history
    ]


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


def save_result(result: StageResult) -> None:
    """`<stage dir>/stage_result.json`: the finished stage's result, all but its predictions
    (beside it in predictions.npy)."""
    assert result.stage_dir is not None
    kept = {k: v for k, v in asdict(result).items() if k != "correct"}
    kept.update(checkpoint=str(result.checkpoint), stage_dir=str(result.stage_dir))
    write_text_atomic(Path(result.stage_dir) / RESULT, json.dumps(kept, indent=1))


def load_result(stage_dir: Path) -> StageResult | None:
    """The result a finished stage left in `stage_dir`, or None when it did not finish there."""
    try:
        kept = json.loads((Path(stage_dir) / RESULT).read_text())
    except (OSError, ValueError):
        return None
    kept.update(
        checkpoint=Path(kept["checkpoint"]),
        stage_dir=Path(kept["stage_dir"]),
        history=[(int(epoch), evaluated) for epoch, evaluated in kept["history"]],
        correct=load_predictions(stage_dir),
    )
    return StageResult(**kept)
