"""Graph compiles in the README's 6-job dim-reduce sweep (issue 50): the sweep run by train.py
in one process (Hydra's basic launcher) under bench/compile_spy.py, by the code before the graph
pool (BEFORE, a git worktree on this venv), by today's code with the compile cache off, with a
cold cache (an empty folder) and with that folder warm (the same sweep again), and with
`runtime.reuse_graphs=false`; then the same sweep under joblib with 2 workers (wall only), before
and now (cache off, cold, warm). Side by side in one run: wall seconds, seconds in graph runs,
MindSpore compiles (new graphs, by cell class; a graph loaded from the compile cache counts)
and their seconds, the wall as a multiple of the graph-run seconds, and the seconds inside
MindSpore's Model.train and Model.eval (the steps with their data pipeline, callbacks and
the compiles made there: "loops") with the wall as a multiple of them. Last, a 3-job sweep over
`optimizer.weight_decay` (the default job), by the code before the decay became a graph input
(BEFORE_DECAY) and today's: the train graphs it compiles.
`python bench/bench_compile.py side [REPEATS]` (about 4 min for 2): issue 64's side by side, the
README sweep as a user runs it (`python train.py -m ...`, the whole process) by the code the
issue measured against (SIDE_BEFORE, a worktree on this venv) and by today's with the compile
cache cold (an empty folder in each fresh launch folder) and warm (a folder one unmeasured run
filled), and cold with the baselines 13ad12f had (no budget arm: the same work), in turn, each
repetition's walls paired.
`python bench/bench_compile.py overhead REV` (about 3 min): the spied sweep by REV (a worktree)
and by today's code, each with an empty cache folder and then that folder again.
`python bench/bench_compile.py runs [REV]` (about 2 min): the spied sweep's graph runs by cell
class (how many, their seconds) by REV (default SIDE_BEFORE; code from before the compile
cache: it compiles every graph), by today's code cold, and cold with SIDE_BEFORE's baselines:
what work today's sweep does that SIDE_BEFORE's did not.
Usage: python bench/bench_compile.py [side [REPEATS] | overhead REV | runs [REV]]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_sweep import SWEEP
from trainjob import REPO, checkout, print_paired, run_train

BEFORE = "76428d5"  # the last landing before issue 50's graph pool
JOBLIB = ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]
SIDE_BEFORE = "13ad12f"  # the code issue 64 put the README sweep's wall against
# the baselines SIDE_BEFORE trained: the budget arm (boost.baselines: budget, 1f26404) came after
SIDE_BEFORE_BASELINES = "boost.baselines=[baseline,annealed,snapshot_mean]"
BEFORE_DECAY = "68752e7"  # the last commit with optimizer.weight_decay folded into the graph
DECAYS = ["-m", "optimizer.weight_decay=1e-4,5e-4,1e-3", "callbacks.progress_bar=false"]


def spied(repo: Path, extra: list[str], sweep: list[str] = SWEEP) -> dict:
    """compile_spy's JSON for `sweep` run by `repo` in a fresh launch folder."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONPATH": str(repo / "src")}
        proc = subprocess.run(
            [
                sys.executable,
                str(REPO / "bench" / "compile_spy.py"),
                str(repo),
                *sweep,
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


def joblib_wall(repo: Path, extra: list[str]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        args = [*SWEEP, *JOBLIB, *extra, f"hydra.sweep.dir={tmp}/multirun"]
        return run_train(args, Path(tmp), repo=repo)


def main() -> None:
    off = ["runtime.compile_cache=false"]
    with checkout(BEFORE) as before, tempfile.TemporaryDirectory() as cache:
        found = {
            f"before {BEFORE}": spied(before, []),
            "now, cache off": spied(REPO, off),
            "now, cache cold": spied(REPO, [f"runtime.compile_cache_dir={cache}/one"]),
            "now, cache warm": spied(REPO, [f"runtime.compile_cache_dir={cache}/one"]),
            "now, reuse_graphs=false": spied(REPO, ["runtime.reuse_graphs=false", *off]),
        }
        walls = {
            f"before {BEFORE}": joblib_wall(before, []),
            "now, cache off": joblib_wall(REPO, off),
            "now, cache cold": joblib_wall(REPO, [f"runtime.compile_cache_dir={cache}/two"]),
            "now, cache warm": joblib_wall(REPO, [f"runtime.compile_cache_dir={cache}/two"]),
        }
    print_spied(found)
    print("the same sweep under joblib, 2 workers (wall s):")
    for label, wall in walls.items():
        print(f"  {label:32s} {wall:7.1f}")
    old = walls[f"before {BEFORE}"]
    for label in ("now, cache off", "now, cache warm"):
        print(f"  {label} / before: {walls[label] / old:.2f}x")
    decay_sweep()


def print_spied(found: dict[str, dict]) -> None:
    """compile_spy's figures of each arm, a row each."""
    print(
        "6-job sweep boost.rho=0.4,0.55,0.7 x boost.sigma=0.2,0.4 (LeNet-5 / digits, 10 + 2 "
        f"epochs), one process (basic launcher), {os.cpu_count()} cores:"
    )
    print(
        f"  {'':32s} {'wall s':>7s} {'graph runs s':>12s} {'wall/runs':>9s} {'loops s':>7s} "
        f"{'wall/loops':>10s} {'compiles':>8s} {'compile s':>9s} {'loaded':>6s}  by cell"
    )
    for label, r in found.items():
        total = sum(r["compiles"].values())
        by_cell = ", ".join(f"{k} {v}" for k, v in sorted(r["compiles"].items()))
        loops = r.get("model loops") or float("nan")  # absent: a spy before this column
        print(
            f"  {label:32s} {r['wall']:7.1f} {r['graph runs']:12.1f} "
            f"{r['wall'] / r['graph runs']:8.2f}x {loops:7.1f} {r['wall'] / loops:9.2f}x "
            f"{total:8d} {r['compile']:9.1f} {r.get('loaded', 0):6d}  {by_cell}"
        )


def overhead(rev: str) -> None:
    """The spied sweep by `rev` (a worktree) and by today's code, each cold then warm."""
    found = {}
    with tempfile.TemporaryDirectory() as cache:
        with checkout(rev) as before:
            for label, repo in ((f"{rev}", before), ("now", REPO)):
                where = [f"runtime.compile_cache_dir={cache}/{label}"]
                found[f"{label}, cache cold"] = spied(repo, where)
                found[f"{label}, cache warm"] = spied(repo, where)
    print_spied(found)


def graph_runs(rev: str) -> None:
    """The spied sweep's graph runs by cell class: `rev` (a worktree of code before the compile
    cache, as SIDE_BEFORE is: it compiles every graph), today's code cold, and cold with
    SIDE_BEFORE's baselines."""
    with tempfile.TemporaryDirectory() as cache, checkout(rev) as before:
        found = {
            rev: spied(before, []),
            "now, cache cold": spied(REPO, [f"runtime.compile_cache_dir={cache}/a"]),
            f"now, cold, {SIDE_BEFORE}'s baselines": spied(
                REPO, [f"runtime.compile_cache_dir={cache}/b", SIDE_BEFORE_BASELINES]
            ),
        }
    print_spied(found)
    print("graph runs by cell class: runs, seconds, ms per run")
    for label, r in found.items():
        cells = sorted(r["runs by cell"].items(), key=lambda kv: -kv[1][1])
        said = ", ".join(
            f"{cell} {n} / {s:.1f} s / {1000 * s / n:.1f} ms" for cell, (n, s) in cells
        )
        print(f"  {label:32s} {said}")


def decay_sweep() -> None:
    """Train graphs of a sweep over optimizer.weight_decay, folded (before) and as an input."""
    print(f"3-job sweep {DECAYS[1]} (the default job), one process, cache off:")
    with checkout(BEFORE_DECAY) as before:
        for label, repo in ((f"before {BEFORE_DECAY}", before), ("now", REPO)):
            found = spied(repo, ["runtime.compile_cache=false"], DECAYS)
            by_cell = ", ".join(f"{k} {v}" for k, v in sorted(found["compiles"].items()))
            print(f"  {label:32s} wall {found['wall']:5.1f} s, compiles: {by_cell}")


def side_by_side(repeats: int) -> None:
    """The README sweep's whole-process wall: SIDE_BEFORE, today's code cold and warm, and cold
    with SIDE_BEFORE's baselines, in turn."""
    with checkout(SIDE_BEFORE) as before, tempfile.TemporaryDirectory() as kept:
        warm = [f"runtime.compile_cache_dir={kept}/cache"]
        cold = ["runtime.compile_cache_dir=compile-cache"]
        arms = {
            SIDE_BEFORE: (before, []),
            "now, cache cold": (REPO, cold),
            "now, cache warm": (REPO, warm),
            f"now, cold, {SIDE_BEFORE}'s baselines": (REPO, [*cold, SIDE_BEFORE_BASELINES]),
        }
        with tempfile.TemporaryDirectory() as tmp:  # fills the warm arm's folder, unmeasured
            run_train([*SWEEP, *warm, f"hydra.sweep.dir={tmp}/multirun"], Path(tmp))
        walls: dict[str, list[float]] = {arm: [] for arm in arms}
        for _ in range(repeats):
            for arm, (repo, extra) in arms.items():
                with tempfile.TemporaryDirectory() as tmp:
                    args = [*SWEEP, *extra, f"hydra.sweep.dir={tmp}/multirun"]
                    walls[arm].append(run_train(args, Path(tmp), repo=repo))
    print_paired(walls, SIDE_BEFORE, "the README sweep, python train.py -m ... (one process)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["side"]:
        side_by_side(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
    elif sys.argv[1:2] == ["overhead"]:
        overhead(sys.argv[2])
    elif sys.argv[1:2] == ["runs"]:
        graph_runs(sys.argv[2] if len(sys.argv) > 2 else SIDE_BEFORE)
    else:
        main()
