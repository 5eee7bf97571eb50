"""Training throughput of whole `python train.py` runs, side by side.

1. parallel: LeNet-5 on digits, standalone vs data2 vs data8 (the same 2 epochs; batch 32 per
   worker) - wall time, rank-0 images/s x workers, and the start-up cost per worker;
2. models: images/s of lenet5/digits, resnet18 at 32x32 and resnet50 at 224x224 (synthetic data).
Images/s leave out graph compilation (measured between step ends). Usage:
    python bench/bench_throughput.py [parallel|models|all]
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run(args: list[str]) -> tuple[float, dict]:
    """(wall seconds, final metrics of the newest run) of one train.py job in a fresh folder."""
    from mlflow.tracking import MlflowClient

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
        cmd = [sys.executable, str(REPO / "train.py"), f"hydra.run.dir={tmp}/run", "callbacks.progress_bar=false",
               "callbacks.best.keep=0", *args]
        start = time.perf_counter()
        subprocess.run(cmd, cwd=tmp, env=env, check=True, capture_output=True)
        wall = time.perf_counter() - start
        client = MlflowClient(f"sqlite:///{tmp}/mlflow.db")
        (found,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
        return wall, found.data.metrics


def parallel() -> None:
    print("LeNet-5 / digits, 2 epochs, batch 32 per worker, 2 cores:")
    base_wall = None
    jobs = (("standalone", 1, []), ("data2", 2, []), ("data8", 8, []),
            ("data8, 8 threads/worker (oversubscribed)", 8, ["runtime.threads=8"]))
    for label, workers, extra_args in jobs:
        option = label.split(",")[0]
        wall, metrics = run([f"parallel={option}", "epochs=2", *extra_args])
        rate = metrics["final/images_per_sec"] * workers
        base_wall = base_wall or wall
        extra = f", start-up +{(wall - base_wall) / workers:.1f} s/worker" if workers > 1 else ""
        print(f"  {label:42s} wall {wall:6.1f} s  {rate:8.0f} images/s (all ranks){extra}")


def models() -> None:
    print("images/s during training (standalone, compile excluded):")
    jobs = {"lenet5 / digits 32x32, batch 32": ["epochs=2"],
            "resnet18 / synthetic 32x32, batch 32": ["model=resnet18", "dataset=synthetic", "epochs=1",
                                                    "dataset.num_samples=512", "dataset.test_samples=32"],
            "resnet50 / synthetic 224x224, batch 8": ["model=resnet50", "dataset=synthetic", "epochs=1",
                                                      "dataset.image_size=224", "dataset.batch_size=8",
                                                      "dataset.num_samples=48", "dataset.test_samples=8"]}
    for name, args in jobs.items():
        wall, metrics = run(args)
        print(f"  {name:38s} {metrics['final/images_per_sec']:8.1f} images/s  (wall {wall:.0f} s)")


if __name__ == "__main__":
    what = sys.argv[1] if len(sys.argv) > 1 else "all"
    if what in ("parallel", "all"):
        parallel()
    if what in ("models", "all"):
        models()
