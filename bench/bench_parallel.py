"""Parallel on one machine: images/s of stand-alone vs data2 vs data8 `python train.py` jobs
(msrun workers on this machine's cores), LeNet-5 and ResNet-18 on Fashion-MNIST, with
sporeflow's thread budget on (each of N local workers gets cores / N kernel threads, the
default) and off (every worker takes all the cores, as each would alone), and data2 with a
requeue armed (SLURM with hydra.launcher.max_num_timeout > 0: the ranks vote at every step
end whether to stop, an AllReduce of one number).

The global batch is 64 in every job (data8: 8 per worker); images/s is the job's rate in
epochs after the first (sporeflow's `train/images_per_sec`: rank 0's step rate x the global
batch, graph compilation left out); wall is the whole command, start-up of every worker included.
Usage: python bench/bench_parallel.py [lenet5,resnet18]
       python bench/bench_parallel.py vote [pairs]   (data2 with and without the vote, paired)
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

from sporeflow.launch.msrun import REQUEUE_ENV
from trainjob import metric_history, run_train, runs

CASES = {
    "lenet5": ["model=lenet5", "dataset.num_samples=12000", "epochs=3"],
    "resnet18": ["model=resnet18", "dataset.num_samples=1024", "epochs=3"],
}
ARMED = {REQUEUE_ENV: "0"}  # the workers of a launcher that SLURM may warn: one vote a step
JOBS = (
    ("standalone", "standalone", [], {}),
    ("data2", "data2", [], {}),
    ("data2, requeue armed", "data2", [], ARMED),
    ("data2, budget off", "data2", [f"runtime.threads={os.cpu_count()}"], {}),
    ("data8", "data8", [], {}),
    ("data8, budget off", "data8", [f"runtime.threads={os.cpu_count()}"], {}),
)


def run(args: list[str], env: dict) -> tuple[float, float]:
    """(wall seconds, the job's images/s after its first epoch) of one train.py job in a fresh
    folder, `env` added to its environment."""
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
            env={**os.environ, **env},
        )
        client, (found,) = runs(Path(tmp))
        return wall, statistics.fmean(metric_history(client, found, "train/images_per_sec")[1:])


def vote_pairs(pairs: int) -> None:
    """data2 with and without the requeue vote, run in turn `pairs` times (LeNet-5; which runs
    first alternates): images/s of each and their paired ratios - the vote's cost, apart from
    the machine's drift and from an advantage of running second."""
    args = [*CASES["lenet5"], "parallel=data2"]
    rows = []
    for pair in range(pairs):
        if pair % 2:
            armed, plain = run(args, ARMED), run(args, {})
        else:
            plain, armed = run(args, {}), run(args, ARMED)
        rows.append((plain[1], armed[1]))
        print(f"  pair {pair + 1}: {plain[1]:.0f} / {armed[1]:.0f} images/s", file=sys.stderr)
    ratios = [armed / plain for plain, armed in rows]
    print(f"data2, LeNet-5, {pairs} pairs (images/s: epochs 2-3):")
    print(
        f"  plain {statistics.fmean(r[0] for r in rows):.0f}, requeue armed "
        f"{statistics.fmean(r[1] for r in rows):.0f}, armed/plain per pair: "
        + ", ".join(f"{r:.3f}" for r in ratios)
    )


def main() -> None:
    if sys.argv[1:2] == ["vote"]:
        vote_pairs(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
        return
    models = sys.argv[1].split(",") if len(sys.argv) > 1 else list(CASES)
    results = {}
    for model in models:
        for label, option, extra, env in JOBS:
            try:
                results[model, label] = run([*CASES[model], f"parallel={option}", *extra], env)
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
