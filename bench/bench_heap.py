"""What MindSpore's garbage collection before every graph compile costs a job, and what
keeping a job's starting objects out of it (runtime.heap) wins back: the same commands run by
this checkout and by the code before it (BEFORE_FREEZE, a git worktree on this venv), in turn,
each in a fresh process and folder: a 2-trial Optuna dim-reduce search on the debug job (what
the sweep tests run), the README's 6-job dim-reduce sweep and the default job.
Usage: python bench/bench_heap.py [repeats]
"""

from __future__ import annotations

import sys

from trainjob import checkout, interleaved_wall_times, print_paired

BEFORE_FREEZE = "402e251"
COMMANDS = {
    "2-trial Optuna search, debug=dim_reduce": [
        "-m",
        "hparams_search=dim_reduce_optuna",
        "debug=dim_reduce",
        "boost.baselines=[baseline]",
        "hydra.sweeper.n_trials=2",
    ],
    "6-job sweep boost.rho x boost.sigma (README)": [
        "-m",
        "boost=dim_reduce",
        "boost.rho=0.4,0.55,0.7",
        "boost.sigma=0.2,0.4",
    ],
    "python train.py (LeNet-5 / digits, 10 epochs)": [],
}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    with checkout(BEFORE_FREEZE) as before:
        for what, args in COMMANDS.items():
            arms = {"frozen": args, BEFORE_FREEZE: args}
            times = interleaved_wall_times(arms, repeats, repos={BEFORE_FREEZE: before})
            print_paired(times, BEFORE_FREEZE, what)


if __name__ == "__main__":
    main()
