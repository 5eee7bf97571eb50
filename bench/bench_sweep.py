"""Sweep cost: the 6-job rho x sigma dim-reduce sweep of the README
(`python train.py -m boost=dim_reduce boost.rho=0.4,0.55,0.7 boost.sigma=0.2,0.4`, the default
LeNet-5 / digits job), with stage-1 and baseline reuse on (the default) and off
(`boost.reuse_stage1=false boost.reuse_baselines=false`), each in a fresh folder: wall time,
how many stage runs were trained, and the size of what the sweep stored; and the default once
more with no logged models and no system metrics ("bare"), to show what those cost a sweep; the
default once with tracking off; and the default run by the code before the tracking journal
(BEFORE_JOURNAL, a git worktree on this venv), side by side. With PAIRS > 1 the default and the
code before the journal run in turn PAIRS times (the table shows each one's median) and the
ratio between them is taken pair by pair: the machine's drift between pairs cancels.
Usage: python bench/bench_sweep.py [PAIRS]
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path

from trainjob import checkout, run_train, runs

SWEEP = [
    "-m",
    "boost=dim_reduce",
    "boost.rho=0.4,0.55,0.7",
    "boost.sigma=0.2,0.4",
    "callbacks.progress_bar=false",
]
NO_REUSE = ["boost.reuse_stage1=false", "boost.reuse_baselines=false"]
# issue 22's additions off: no logged models, no system metrics (what the sweep cost before them)
BARE = ["tracking.log_model=false", "tracking.system_metrics_interval=0"]
UNTRACKED = ["tracking.enabled=false"]
BEFORE_JOURNAL = "3c38c13"  # the parent of c63e2c5, which brought the tracking journal


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def sweep(extra: list[str], **where) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        wall = run_train([*SWEEP, *extra, f"hydra.sweep.dir={tmp}/multirun"], Path(tmp), **where)
        tracked = (Path(tmp) / "mlflow.db").exists()
        stages = (
            Counter(r.data.tags.get("stage", "sweep") for r in runs(Path(tmp))[1])
            if tracked
            else Counter()
        )
        return {
            "wall": wall,
            "stages": stages,
            "artifacts": size_mb(Path(tmp) / "mlartifacts"),
            "outputs": size_mb(Path(tmp) / "multirun"),
        }


def paired(pairs: int, before: Path) -> tuple[dict, dict, list[float]]:
    """The default and the code before the journal, in turn `pairs` times: each one's run of
    median wall time, and each pair's ratio."""
    runs = [(sweep([]), sweep([], repo=before)) for _ in range(pairs)]
    ratios = [now["wall"] / old["wall"] for now, old in runs]
    medians = []
    for arm in zip(*runs, strict=True):
        walls = [r["wall"] for r in arm]
        medians.append(arm[walls.index(statistics.median_low(walls))])
    return medians[0], medians[1], ratios


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 1
    with checkout(BEFORE_JOURNAL) as before:
        default, old, ratios = paired(pairs, before)
        found = {
            "reuse on (default)": default,
            f"before journal {BEFORE_JOURNAL}": old,
            "reuse on, bare": sweep(BARE),
            "tracking off": sweep(UNTRACKED),
            "reuse off": sweep(NO_REUSE),
        }
    print(
        "6-job sweep boost.rho=0.4,0.55,0.7 x boost.sigma=0.2,0.4 (LeNet-5 / digits, 10 + 2 epochs), "
        f"{os.cpu_count()} cores:"
    )
    print(
        f"  {'':26s} {'wall s':>7s} {'stage1':>7s} {'stage2':>7s} {'baselines':>10s} {'MLflow MB':>10s} "
        f"{'run dirs MB':>12s}"
    )
    for label, r in found.items():
        s = r["stages"]
        counts = (s["stage1"], s["stage2"], s["baseline"] + s["annealed"] + s["snapshot_mean"])
        shown = [f"{n:d}" if s else "-" for n in counts]  # no store: nothing to count
        print(
            f"  {label:26s} {r['wall']:7.1f} {shown[0]:>7s} {shown[1]:>7s} {shown[2]:>10s} "
            f"{r['artifacts']:10.1f} {r['outputs']:12.1f}"
        )
    on, off = found["reuse on (default)"], found["reuse off"]
    print(
        f"  reuse saves {off['wall'] - on['wall']:.0f} s ({off['wall'] / on['wall']:.2f}x faster)"
    )
    print(
        f"  default / before the journal: {statistics.median(ratios):.2f}x (pairs: "
        f"{', '.join(f'{r:.3f}' for r in ratios)}; walls above: each arm's median of {pairs})"
    )


if __name__ == "__main__":
    main()
