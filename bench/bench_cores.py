"""How much of a job's wall a second core buys (issue 64: can the README sweep's graph runs go
faster on this machine?). The default job and the README sweep, each with an empty compile
cache in a fresh launch folder, on both cores and pinned to one (`os.sched_setaffinity`, which
the job's processes inherit: the tracking writer shares the core; MindSpore sizes its thread
pools from the machine, not the mask, so they share it too, as for a user who pins a job), in
turn (the order reversed every other repetition), each repetition's walls paired. A job
whose wall barely moves on one core is a chain of hand-offs (Python, then MindSpore's actor
and kernel threads, then the data pipeline's), not work a core can share.

Usage: python bench/bench_cores.py [JOB_REPEATS [SWEEP_REPEATS]]   (defaults 5 and 2; about
4 min on a fast machine)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from bench_sweep import SWEEP
from trainjob import print_paired, run_train

COLD = ["runtime.compile_cache_dir=compile-cache", "callbacks.progress_bar=false"]


def walls_by_cores(args: list[str], repeats: int) -> dict[str, list[float]]:
    """`python train.py ARGS` on every core this process may use, then on its first one, in
    turn `repeats` times, each in a fresh launch folder."""
    cores = sorted(os.sched_getaffinity(0))
    arms = {f"{len(cores)} cores": set(cores), "1 core": {cores[0]}}
    found: dict[str, list[float]] = {arm: [] for arm in arms}
    for repetition in range(repeats):
        order = list(arms.items())
        for arm, allowed in order if repetition % 2 == 0 else reversed(order):
            os.sched_setaffinity(0, allowed)
            try:
                with tempfile.TemporaryDirectory() as tmp:
                    sweep_dir = [f"hydra.sweep.dir={tmp}/multirun"] if "-m" in args else []
                    found[arm].append(run_train([*args, *COLD, *sweep_dir], Path(tmp)))
            finally:
                os.sched_setaffinity(0, set(cores))
    return found


def main(job_repeats: int, sweep_repeats: int) -> None:
    job = walls_by_cores([], job_repeats)
    print_paired(job, next(iter(job)), "python train.py (LeNet-5 / digits, 10 epochs)")
    sweep = walls_by_cores(SWEEP, sweep_repeats)
    print_paired(sweep, next(iter(sweep)), "the README sweep, python train.py -m ... (one process)")


if __name__ == "__main__":
    counts = [int(a) for a in sys.argv[1:3]]
    main(*(counts + [5, 2][len(counts) :]))
