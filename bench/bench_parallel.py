"""Parallel on one machine: images/s of stand-alone vs data2 vs data8 `python train.py` jobs
(msrun workers on this machine's cores), LeNet-5 and ResNet-18 on Fashion-MNIST, with
sporeflow's thread budget on (each of N local workers gets cores / N kernel threads, the
default) and off (every worker takes all the cores, as each would alone).

The global batch is 64 in every job (data8: 8 per worker); images/s is the job's rate in
epochs after the first (sporeflow's `train/images_per_sec`: rank 0's step rate x the global
batch, graph compilation left out); wall is the whole command, start-up of every worker included.
Usage: python bench/bench_parallel.py [lenet5,resnet18]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from trainjob import metric_history, run_train, runs

CASES = {
    "lenet5": ["model=lenet5", "dataset.num_samples=12000", "epochs=3"],
    "resnet18": ["model=resnet18", "dataset.num_samples=1024", "epochs=3"],
}
JOBS = (
    ("standalone", "standalone", []),
    ("data2", "data2", []),
    ("data2, budget off", "data2", [f"runtime.threads={os.cpu_count()}"]),
    ("data8", "data8", []),
    ("data8, budget off", "data8", [f"runtime.threads={os.cpu_count()}"]),
)


def run(args: list[str]) -> tuple[float, float]:
    """(wall seconds, the job's images/s after its first epoch) of one train.py job in a fresh folder."""
    with tempfile.TemporaryDirectory() as tmp:
        wall = run_train(
            [
                f"hydra.run.dir={tmp}/run",
                "dataset=fashion_mnist",
                "dataset.batch_size=64",
                "optimizer=momentum",
                "optimizer.lr=0.01",
                "callbacks.progress_bar=false",
                *args,
            ],
            Path(tmp),
        )
        client, (found,) = runs(Path(tmp))
        return wall, statistics.fmean(metric_history(client, found, "train/images_per_sec")[1:])


def main() -> None:
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    results = {}
    for model in models:
        for label, option, extra in JOBS:
            try:
                results[model, label] = run([*CASES[model], f"parallel={option}", *extra])
            except RuntimeError as ex:  # a failed job is a finding: the table says so and goes on
                results[model, label] = (float("nan"), float("nan"))
                print(
                    f"  {model} {label} failed: {str(ex).strip().splitlines()[-1]}", file=sys.stderr
                )
            print(f"  measured {model} {label}", file=sys.stderr, flush=True)
    print(
        f"data parallel on one machine ({os.cpu_count()} cores), Fashion-MNIST 32x32, global batch 64, "
        "3 epochs (images/s: epochs 2-3):"
    )
    print(f"  {'model':9s} {'job':18s} {'images/s':>9s} {'vs standalone':>14s} {'wall s':>7s}")
    for (model, label), (wall, rate) in results.items():
        base = results[model, "standalone"][1]
        print(f"  {model:9s} {label:18s} {rate:9.0f} {rate / base:13.2f}x {wall:7.1f}")


if __name__ == "__main__":
    main()
