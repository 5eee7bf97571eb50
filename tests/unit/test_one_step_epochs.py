"""A stage whose training split is one batch (`dataset.batch_size=<the split's size>`: one step
per epoch) trains: its result line says it did, with its optimizer updates, and its throughput
measured or said to be unknown - never `nothing left to train`, which was printed because the
throughput hook timed only between the steps of an epoch and the line read its missing rate as
"no step ran"."""

from __future__ import annotations

import math

import pytest

from helpers.inprocess import TINY
from helpers.inprocess import run_train_here as run_train
from helpers.store import client_of, runs_of

TRAIN_IMAGES = 100  # TINY's 128 stored training images less 28 held out for validation
ONE_STEP = [*TINY, "dataset.val_split=28", f"dataset.batch_size={TRAIN_IMAGES}"]


def result_line(stderr: str) -> str:
    (line,) = [ln for ln in stderr.splitlines() if ln.startswith("[sporeflow] train:")]
    return line


@pytest.mark.parametrize("epochs", [1, 3])
def test_a_stage_of_one_step_per_epoch_says_it_trained(tmp_path, epochs):
    """3 epochs: epochs 2 and 3 are timed from their start to their step's end (epoch 1's step
    compiles the graph), so the line and `final/images_per_sec` carry a rate. 1 epoch: its one
    step compiles the graph, so the rate is unknown and the line says so."""
    proc = run_train([*ONE_STEP, f"epochs={epochs}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = result_line(proc.stderr)
    assert "nothing left to train" not in line, line
    assert f"(batch {TRAIN_IMAGES}, {epochs} optimizer updates)" in line, line
    (run,) = runs_of(tmp_path)
    assert run.data.tags["batch.steps_per_epoch"] == "1"
    metrics = run.data.metrics
    assert metrics["cost/optimizer_steps"] == epochs
    client = client_of(tmp_path)
    rates = client.get_metric_history(run.info.run_id, "train/images_per_sec")
    if epochs == 1:
        assert "images/s unknown" in line, line
        assert "final/images_per_sec" not in metrics and not rates
        return
    speed = metrics["final/images_per_sec"]
    assert math.isfinite(speed) and speed > 0
    assert f", {speed:.0f} images/s (batch" in line, line
    assert [m.step for m in rates] == [2, 3]  # one rate an epoch, the compiling one left out
    assert all(m.value > 0 for m in rates)
