"""Issue 61: validation images choose, test images report. A data set built so that the two
disagree: an image folder whose train/ and val/ label red images `a` and green ones `b`, while
its test/ holds them the other way round. The more a network learns, the better it does on
validation and the worse on test - so whatever follows the test split moves one way and
whatever follows validation the other: best-k checkpoints, early stopping, a sweep's winner.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from PIL import Image
from statsmodels.stats.proportion import proportion_confint

from helpers.inprocess import run_train_here
from helpers.store import runs_of

COLOURS = {"red": (200, 40, 40), "green": (40, 200, 40)}
LAYOUT = {  # split -> class folder -> the colour its images have
    "train": {"a": "red", "b": "green"},
    "val": {"a": "red", "b": "green"},
    "test": {"a": "green", "b": "red"},  # swapped: learning the training labels fails here
}
COUNTS = {"train": 24, "val": 8, "test": 8}


def swapped_folder(root) -> None:
    """8 x 8 PNGs of one colour each, a little noise so no two are equal."""
    rng = np.random.default_rng(0)
    for split, classes in LAYOUT.items():
        for name, colour in classes.items():
            (root / split / name).mkdir(parents=True)
            for i in range(COUNTS[split]):
                pixels = np.clip(COLOURS[colour] + rng.integers(-20, 21, (8, 8, 3)), 0, 255)
                Image.fromarray(pixels.astype(np.uint8)).save(root / split / name / f"{i}.png")


def job(root, *extra) -> list[str]:
    return [
        "dataset=imagenet",
        f"dataset.root={root}",
        "dataset.image_size=8",
        "dataset.num_classes=2",
        "dataset.batch_size=8",
        "dataset.mean=0.5",
        "dataset.std=0.25",
        "model=mlp",
        "model.hidden=16",
        "optimizer=sgd",
        "optimizer.lr=0.5",
        "callbacks.progress_bar=false",
        "tracking.log_model=false",
        *extra,
    ]


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    root = tmp_path_factory.mktemp("swapped")
    swapped_folder(root / "images")
    return root


def history(launch, run, key) -> list[float]:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    return [
        m.value
        for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
    ]


def test_validation_and_test_disagree_and_every_epoch_reads_validation(swapped):
    launch = swapped / "plain"
    launch.mkdir()
    proc = run_train_here(
        job(
            swapped / "images",
            "epochs=4",
            "callbacks.best.monitor=loss",
            "callbacks.best.mode=min",
        ),
        launch,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_of(launch)
    val_loss, val_acc = history(launch, run, "val/loss"), history(launch, run, "val/acc")
    assert len(val_loss) == len(val_acc) == 4, "an evaluation of validation after every epoch"
    assert val_loss == sorted(val_loss, reverse=True), "learning: validation loss falls"
    assert len(history(launch, run, "test/acc")) == 1, "the test split is read once"
    m = run.data.metrics
    assert m["final/val/acc"] > 0.9 and m["test/acc"] < 0.1, "the data set makes them disagree"
    assert m["test/loss"] > m["final/val/loss"]
    # best-k ranks by validation loss: the last epoch's weights, where test loss is worst
    (best,) = (launch / "run" / "checkpoints").glob("best_loss_*")
    assert re.search(r"_epoch_0004\.", best.name), best.name
    # the per-image files: validation (what a sweep decides on), test (what reports)
    val_right = np.load(launch / "run" / "predictions.npy")
    test_right = np.load(launch / "run" / "test_predictions.npy")
    assert len(val_right) == 2 * COUNTS["val"] and len(test_right) == 2 * COUNTS["test"]
    assert val_right.mean() == pytest.approx(m["final/val/acc"])
    assert test_right.mean() == pytest.approx(m["test/acc"])


def test_early_stopping_follows_validation_not_test(swapped):
    """Test loss rises from the first epoch: an early stop reading it would end after 1 + 1
    epochs; reading validation (falling) it trains all 4."""
    launch = swapped / "early"
    launch.mkdir()
    proc = run_train_here(
        job(
            swapped / "images",
            "epochs=4",
            "callbacks=early_stop",
            "callbacks.hooks.0.patience=1",
            "+callbacks.hooks.0.monitor=loss",
            "+callbacks.hooks.0.mode=min",
        ),
        launch,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_of(launch)
    assert len(history(launch, run, "val/loss")) == 4, proc.stderr[-2000:]


def test_a_sweep_decides_on_validation_and_reports_the_winner_on_test(swapped, capsys):
    """Two points, trained 1 and 4 epochs: validation prefers the longer one, test the shorter.
    The sweep's winner is validation's; its test accuracy is reported as such, with how much
    validation flattered it."""
    from helpers.sweeps import run_sweep

    launch = swapped / "sweep"
    launch.mkdir()
    base = job(swapped / "images")
    points = [["epochs=1", "optimizer.lr=0.01"], ["epochs=4"]]
    callback = run_sweep(launch, points, ["epochs=1,4"], base=base)
    err = capsys.readouterr().err
    runs = runs_of(launch)
    parent = next(r for r in runs if r.info.run_id == callback.run_id)
    jobs = {r.data.tags["sweep.job"]: r for r in runs if r.data.tags.get("sweep.run_id")}
    val = {n: r.data.metrics["final/val/acc"] for n, r in jobs.items()}
    tested = {n: r.data.metrics["test/acc"] for n, r in jobs.items()}
    assert val["1"] > val["0"] and tested["1"] < tested["0"], (val, tested)
    assert parent.data.tags["sweep.best_job"] == "1", "validation's choice, not test's"
    reported = parent.data.metrics["best/test/value"]
    assert reported == pytest.approx(tested["1"])
    assert parent.data.metrics["best/optimism"] == pytest.approx(val["1"] - tested["1"])
    (line,) = [ln for ln in err.splitlines() if ln.startswith("reported: ")]
    assert f"{reported:.4f}" in line and "the estimate nothing chose" in line
    # issue 76 item 1: the console's interval is the parent's metrics, Wilson's (statsmodels)
    images = COUNTS["test"] * 2
    low, high = proportion_confint(round(reported * images), images, method="wilson")
    m = parent.data.metrics
    assert (m["best/test/ci_low"], m["best/test/ci_high"]) == pytest.approx((low, high), abs=1e-9)
    assert f"(95% CI {low:.4f}..{high:.4f}, {images} images)" in line


def test_without_a_validation_split_choices_read_test_and_the_run_says_so(swapped):
    """dataset.val_split=0 on a two-folder layout (train/ and val/, val/ the test split): the
    epochs' evaluations read the test images, one line says so and the run is tagged."""
    root = swapped / "two_folders"
    for split, folder in (("train", "train"), ("test", "val")):
        for name in ("a", "b"):
            source = swapped / "images" / split / name
            (root / folder / name).mkdir(parents=True)
            for image in source.iterdir():
                (root / folder / name / image.name).write_bytes(image.read_bytes())
    launch = swapped / "no_val"
    launch.mkdir()
    proc = run_train_here(job(root, "epochs=1", "dataset.val_split=0"), launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    said = [ln for ln in (proc.stdout + proc.stderr).splitlines() if "dataset.val_split=0" in ln]
    assert len(said) == 1 and "reads the test images" in said[0], said
    (run,) = runs_of(launch)
    assert run.data.tags["sporeflow.selection"] == "test"
    contexts = [t.value for d in run.inputs.dataset_inputs for t in d.tags]
    assert "validation" not in contexts and "evaluation" in contexts
    m = run.data.metrics
    assert m["final/val/acc"] == m["test/acc"], "validation is the test split here"


def test_a_race_ranks_its_points_by_their_validation_accuracy(swapped, tmp_path):
    """A race of two learning rates over two seeds: every value it ranks (its race.csv) is the
    job's validation accuracy, which prefers the point the test images would drop."""
    import csv

    from helpers.inprocess import train_cli

    args = ["-m", "hydra/sweeper=sporeflow_race", "hydra.sweeper.max_seeds=2"]
    fixed = [o for o in job(swapped / "images", "epochs=4") if not o.startswith("optimizer.lr")]
    args += ["+hydra.sweeper.params.optimizer.lr='0.001,0.5'", *fixed]
    code, err = train_cli([*args, f"hydra.sweep.dir={tmp_path}/multirun"], tmp_path, run_dir=None)
    assert code == 0, err[-3000:]
    with open(tmp_path / "multirun" / "race.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    jobs = {r.data.tags["sweep.job"]: r for r in runs_of(tmp_path) if "sweep.job" in r.data.tags}
    assert len(rows) == len(jobs) == 4
    for row in rows:
        metrics = jobs[row["job"]].data.metrics
        assert float(row["value"]) == pytest.approx(metrics["final/val/acc"]), row
    learnt = [float(r["value"]) for r in rows if r["point"] == "optimizer.lr=0.5"]
    barely = [float(r["value"]) for r in rows if r["point"] == "optimizer.lr=0.001"]
    assert min(learnt) > max(barely), (learnt, barely)
    tested = {r["point"]: jobs[r["job"]].data.metrics["test/acc"] for r in rows}
    assert tested["optimizer.lr=0.5"] < tested["optimizer.lr=0.001"], (
        "test ranks them the other way"
    )
