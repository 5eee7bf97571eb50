"""What the benchmarks of whole `python train.py` jobs share: run one job in a launch folder
(its sqlite MLflow store lands there), fail loudly with its stderr, read its runs back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_train(
    args: list[str], launch_dir: Path, env: dict | None = None, repo: Path = REPO
) -> float:
    """Wall seconds of `python train.py ARGS` run in `launch_dir` (raises with its stderr on
    failure); `repo`: another checkout's train.py (its src/ first on the path)."""
    cmd = [sys.executable, str(repo / "train.py"), *args]
    if repo != REPO:
        env = {**(env or os.environ), "PYTHONPATH": str(repo / "src")}
    start = time.perf_counter()
    proc = subprocess.run(
        cmd,
        cwd=launch_dir,
        env={**(env or os.environ), "MLFLOW_TRACKING_URI": ""},
        capture_output=True,
        text=True,
    )
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start


@contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A git worktree of `rev` (removed after): older code run on this venv, side by side."""
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        where = Path(tmp) / rev
        git = ["git", "-C", str(REPO)]
        subprocess.run(
            [*git, "worktree", "add", "--detach", str(where), rev], check=True, capture_output=True
        )
        try:
            yield where
        finally:
            subprocess.run([*git, "worktree", "remove", "--force", str(where)], check=True)


def runs(launch_dir: Path, filter_string: str = ""):
    """(client, runs of the `sporeflow` experiment in the launch folder's store matching the filter)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{Path(launch_dir) / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("sporeflow").experiment_id
    return client, client.search_runs([experiment], filter_string, max_results=5000)


def metric_history(client, run, key: str) -> list[float]:
    """A run's values of one metric in step order."""
    return [
        m.value
        for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
    ]


def interleaved_wall_times(
    arms: dict[str, list[str]], repeats: int, repos: dict[str, Path] | None = None
) -> dict[str, list[float]]:
    """Each arm's `python train.py ARGS` wall seconds, arms in turn per repetition (A B C A B C
    ...), each run in a fresh process and a fresh launch folder; `repos`: the arms run by
    another checkout (`checkout`)."""
    import tempfile

    found: dict[str, list[float]] = {arm: [] for arm in arms}
    for _ in range(repeats):
        for arm, args in arms.items():
            with tempfile.TemporaryDirectory() as tmp:
                where = (repos or {}).get(arm, REPO)
                args = [*args, "callbacks.progress_bar=false"]
                found[arm].append(run_train(args, Path(tmp), repo=where))
    return found


def print_paired(times: dict[str, list[float]], base: str, what: str) -> None:
    """Median per arm and its ratio to `base` pair by pair (the same repetition's run), so the
    machine's drift between repetitions cancels."""
    import statistics

    repeats = len(times[base])
    print(
        f"{what}, wall s, median of {repeats}, CPU (2 cores);"
        f" x {base}: median of the paired ratios [min-max]:"
    )
    for arm, found in times.items():
        ratios = [t / b for t, b in zip(found, times[base], strict=False)]
        print(
            f"  {arm:10s} {statistics.median(found):6.1f} s  {statistics.median(ratios):5.3f}x"
            f" [{min(ratios):.3f}-{max(ratios):.3f}]   runs: {', '.join(f'{t:.1f}' for t in found)}"
        )
