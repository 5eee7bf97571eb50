"""Graph compiles in the README's 6-job dim-reduce sweep (issue 50): the sweep run by train.py
in one process (Hydra's basic launcher) under bench/compile_spy.py, by the code before the graph
pool (BEFORE, a git worktree on this venv), by today's code, and by today's with
`runtime.reuse_graphs=false`; then the same sweep under joblib with 2 workers (wall only), before
and now. Side by side in one run: wall seconds, seconds in graph runs, MindSpore compiles (new
graphs, by cell class) and their seconds, and the wall as a multiple of the graph-run seconds.
Usage: python bench/bench_compile.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_sweep import SWEEP
from trainjob import REPO, checkout, run_train

BEFORE = "76428d5"  # the last landing before issue 50's graph pool
JOBLIB = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]


def spied(repo: Path, extra: list[str]) -> dict:
    """compile_spy's JSON for the sweep run by `repo` in a fresh launch folder."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONPATH": str(repo / "src")}
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "compile_spy.py"),
                str(repo),
                *SWEEP,
                *extra,
                f"hydra.sweep.dir={tmp}/multirun",
            ],
            cwd=tmp,
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode:
            raise RuntimeError(f"{repo} sweep exited {proc.returncode}:\n{proc.stderr[-3000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])


def joblib_wall(repo: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        return run_train([*SWEEP, *JOBLIB, f"hydra.sweep.dir={tmp}/multirun"], Path(tmp), repo=repo)


def main() -> None:
    with checkout(BEFORE) as before:
        found = {
            f"before {BEFORE}": spied(before, []),
            "now": spied(REPO, []),
            "now, reuse_graphs=false": spied(REPO, ["runtime.reuse_graphs=false"]),
        }
        walls = {f"before {BEFORE}": joblib_wall(before), "now": joblib_wall(REPO)}
    print(
        "6-job sweep boost.rho=0.4,0.55,0.7 x boost.sigma=0.2,0.4 (LeNet-5 / digits, 10 + 2 "
        f"epochs), one process (basic launcher), {os.cpu_count()} cores:"
    )
    print(
        f"  {'':26s} {'wall s':>7s} {'graph runs s':>12s} {'wall/runs':>9s} {'compiles':>8s} "
        f"{'compile s':>9s}  by cell"
    )
    for label, r in found.items():
        total = sum(r["compiles"].values())
        by_cell = ", ".join(f"{k} {v}" for k, v in sorted(r["compiles"].items()))
        print(
            f"  {label:26s} {r['wall']:7.1f} {r['graph runs']:12.1f} "
            f"{r['wall'] / r['graph runs']:8.2f}x {total:8d} {r['compile']:9.1f}  {by_cell}"
        )
    print("the same sweep under joblib, 2 workers (wall s):")
    for label, wall in walls.items():
        print(f"  {label:26s} {wall:7.1f}")
    now, old = walls["now"], walls[f"before {BEFORE}"]
    print(f"  now / before: {now / old:.2f}x")


if __name__ == "__main__":
    main()
