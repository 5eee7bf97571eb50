"""What a stage leaves behind for the stages and the comparison after it: its final metrics,
weights, per-epoch evaluations and, per image, whether it was right - on the validation split
(`predictions.npy`, what choices pair) and on the test split (`test_predictions.npy`, what
reports pair); a reused stage brings its files along. A pipeline's finished stage also writes its result to
`stage_result.json` in its dir: a continued pipeline (a requeue, `resume=`) takes it from there
instead of training the stage again."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from sporeflow.core.names import PREDICTIONS, TEST_PREDICTIONS
from sporeflow.engine.predictions import evaluated
from sporeflow.report.classification import classification_metrics
from sporeflow.storage.files import atomic_path, write_text_atomic

RESULT = "stage_result.json"


@dataclass
class StageResult:
    name: str
    metrics: dict  # the exported weights on the validation split: acc, loss (what choices read)
    checkpoint: Path  # network weights after the stage (EMA if eval_with=ema)
    images_per_sec: float  # NaN: unknown (no step timed apart from the graph's compile)
    history: list = field(default_factory=list)  # [(epoch, {metric: value})]
    batching: str = ""  # workers, per-worker and global batch, optimizer updates
    val_correct: np.ndarray | None = None  # per validation image: right or not (choices pair it)
    run_id: str | None = None  # its MLflow run (None when tracking is off)
    stage_dir: Path | None = None  # where its files are (a reused run's dir or fetched copy)
    reused_from: str | None = None  # the MLflow run it was reused from, when not trained here
    cost: dict = field(default_factory=dict)  # what it spent, as its run records it (engine.cost)
    test_metrics: dict = field(default_factory=dict)  # the exported weights on the test split
    test_correct: np.ndarray | None = None  # per test image: right or not (reports pair it)
    # train-cell steps this run of the stage took (not those before its resume): 0 when it
    # trained nothing here (a resume with no epoch left, an evaluated or reused stage)
    trained_steps: int = 0

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


def judged(model, data) -> tuple[np.ndarray, dict[str, float]]:
    """A stage's exported weights (in `model`, a mindspore.Model) on one split, one pass:
    right/wrong per image (what a paired comparison needs), acc and loss as `Model.eval`
    reports them, top-5 and per-class accuracy (`acc_top5`, `acc_class_<c>`)."""
    logits, labels, measured = evaluated(model, data)
    if not len(labels):
        return np.zeros(0, bool), {}
    found = classification_metrics(logits, labels)
    found.pop("acc")  # MindSpore's Accuracy counted it above, as Model.eval does
    return logits.argmax(axis=1) == labels, {**measured, **found}


@dataclass(frozen=True)
class Ended:
    """A stage's exported weights measured at its end: on the validation split (`val`: acc,
    loss, what choices read) and, the one time a stage reads it, on the test split (`test`:
    acc, loss, top-5, per class: what reports show); right/wrong per image of each."""

    val: dict
    val_correct: np.ndarray
    test: dict
    test_correct: np.ndarray

    def metrics(self) -> dict[str, float]:
        """As the stage's run records them: `final/val/<metric>` (the exported weights; a
        plain job's objective), `test/<metric>`."""
        return {
            **{f"final/val/{k}": v for k, v in self.val.items()},
            **{f"test/{k}": v for k, v in self.test.items()},
        }


def ended(model, val: dict, val_data, test_data) -> Ended:
    """`val`: the exported weights' validation metrics (acc, loss) as the last evaluation
    measured them; the rest measured here, one pass a split: right/wrong per validation image
    and top-5, and the test split's acc, loss, top-5 and per-class accuracy."""
    val_correct, val_classified = judged(model, val_data)
    test_correct, tested = judged(model, test_data)
    return Ended(
        {**val, **{k: v for k, v in val_classified.items() if k == "acc_top5"}},
        val_correct,
        tested,
        test_correct,
    )


def save_predictions(stage_dir: Path, end: Ended) -> list[Path]:
    """`<stage dir>/predictions.npy` (right/wrong per validation image: a sweep decides on
    them) and `test_predictions.npy` (per test image: a pipeline's report pairs them)."""
    paths = []
    for name, correct in ((PREDICTIONS, end.val_correct), (TEST_PREDICTIONS, end.test_correct)):
        path = Path(stage_dir) / name
        with atomic_path(path) as tmp:
            np.save(tmp, correct.astype(bool))
        paths.append(path)
    return paths


def load_predictions(stage_dir: Path, name: str = PREDICTIONS) -> np.ndarray | None:
    path = Path(stage_dir) / name
    return np.load(path, allow_pickle=False) if path.is_file() else None


def save_result(result: StageResult) -> None:
    """`<stage dir>/stage_result.json`: the finished stage's result, all but its predictions
    (beside it in predictions.npy)."""
    assert result.stage_dir is not None
    kept = {k: v for k, v in asdict(result).items() if not k.endswith("correct")}
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
        val_correct=load_predictions(stage_dir),
        test_correct=load_predictions(stage_dir, TEST_PREDICTIONS),
    )
    return StageResult(**kept)
