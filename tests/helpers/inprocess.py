"""Run a job in this process, the way `python train.py` would after Hydra composed its config:
validate -> run_pipeline, against a sqlite store in the launch dir. For the unit tier: the
stage runner, specs, reuse and the pipeline without paying a new interpreter per test."""

from __future__ import annotations

from pathlib import Path

from helpers.train import TRAIN
from sporeflow.config.validation import validate
from sporeflow.core.context import RunContext

# a network and data set small enough that a whole pipeline takes seconds (random labels:
# these runs check mechanics, not learning)
TINY = [
    "dataset=synthetic",
    "dataset.image_size=8",
    "dataset.channels=1",
    "dataset.num_samples=128",
    "dataset.test_samples=64",
    "model=mlp",
    "model.hidden=16",
    "callbacks.progress_bar=false",
]
TINY_PIPELINE = [*TINY, "debug=dim_reduce"]


def context(launch_dir: Path, overrides, run: str = "run") -> RunContext:
    return RunContext(
        run_dir=Path(launch_dir) / run,
        launch_dir=Path(launch_dir),
        overrides=list(overrides),
        entry_script=TRAIN,
    )


def run_job(compose, launch_dir: Path, overrides, run: str = "run") -> tuple[float, object]:
    """(the job's objective, its validated config) of the job `overrides` composes, run here
    with run dir `<launch_dir>/<run>`."""
    from sporeflow.stages.pipeline import run_pipeline

    cfg = validate(compose(list(overrides)))
    return run_pipeline(cfg, context(launch_dir, overrides, run)), cfg
