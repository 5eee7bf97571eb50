"""What the Optuna sweeper's pruner and slots save (issue 23), each arm a real sweep of train.py
in a fresh launch dir (its own stage 1, baselines, MLflow store and study).

  pruning  a 12-trial TPE search of the dim-reduce preset (seeded), 4 stage-2 epochs:
           pruner=none vs median. Figures: the sweep's wall time, stage-2 epochs trained,
           trials pruned, the best trial's stage-2 accuracy (what pruning may cost).
  slots    8 plain jobs of unequal length (grid epochs=12,2,2,2,12,2,2,2) under joblib,
           n_jobs=2: batches (batched=true, the official plugin's way) vs slots.
Usage: python bench/bench_optuna_sweeper.py [pruning|slots|all]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna

from trainjob import REPO

PRUNING = [
    "hparams_search=dim_reduce_optuna",
    "boost.epochs=4",
    "boost.baselines=[baseline]",
    "hydra.sweeper.n_trials=12",
]
SLOTS = [
    "hydra/sweeper=sporeflow_optuna",
    "hydra.sweeper.sampler=grid",
    "hydra.sweeper.storage=null",
    "hydra/launcher=joblib",
    "hydra.launcher.n_jobs=2",
    "hydra.sweeper.n_jobs=2",
]
TRAIN_JOBS = ["epochs=30,3,3,3,30,3,3,3", "runtime.threads=1"]
SPHERE = REPO / "tests" / "helpers" / "sphere" / "sphere.py"
WAITING_JOBS = ["+sleep=8,1,1.1,1.2,8.1,1.3,1.4,1.5", "hydra.sweeper.params=null"]


def sweep(args: list[str], launch_dir: Path, app: Path = REPO / "train.py") -> float:
    """Wall seconds of `python APP -m ARGS` in `launch_dir` (it must succeed)."""
    cmd = [sys.executable, str(app), "-m", *args, f"hydra.sweep.dir={launch_dir / 'multirun'}"]
    if app.name == "train.py":
        cmd.append("callbacks.progress_bar=false")
    env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=launch_dir, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - started


def pruning() -> None:
    print("pruning: 12-trial TPE search, dim_reduce preset, 4 stage-2 epochs (seed 1)")
    print(
        f"{'pruner':>8} {'wall s':>8} {'ratio':>6} {'stage-2 epochs':>15} {'pruned':>7} {'best acc':>9}"
    )
    base = None
    for pruner in ("none", "median"):
        with tempfile.TemporaryDirectory() as tmp:
            wall = sweep([*PRUNING, f"hydra.sweeper.pruner={pruner}"], Path(tmp))
            study = optuna.load_study(study_name="dim_reduce", storage=f"sqlite:///{tmp}/optuna.db")
            trials = study.get_trials()
            # a trial without a pruner reports nothing: it trained all its epochs
            epochs = sum(len(t.intermediate_values) or 4 for t in trials)
            pruned = sum(t.state.name == "PRUNED" for t in trials)
            base = base or wall
            print(
                f"{pruner:>8} {wall:8.1f} {wall / base:6.3f} {epochs:15d} {pruned:7d} "
                f"{study.best_value:9.4f}"
            )


def slots() -> None:
    print("slots: 8 jobs of unequal length, joblib n_jobs=2")
    print(f"{'jobs':>28} {'mode':>8} {'wall s':>8} {'ratio':>6}")
    kinds = (
        ("train.py epochs 30,3,3,3,...", TRAIN_JOBS, REPO / "train.py"),
        ("waiting 8,1,1,1,8,1,1,1 s", WAITING_JOBS, SPHERE),
    )
    for label, jobs, app in kinds:
        base = None
        for mode, extra in (("batches", ["hydra.sweeper.batched=true"]), ("slots", [])):
            with tempfile.TemporaryDirectory() as tmp:
                wall = sweep([*SLOTS, *jobs, *extra], Path(tmp), app)
                base = base or wall
                print(f"{label:>28} {mode:>8} {wall:8.1f} {wall / base:6.3f}")


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "all"
    if which in ("slots", "all"):
        slots()
    if which in ("pruning", "all"):
        pruning()
