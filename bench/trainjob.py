"""What the benchmarks of whole `python train.py` jobs share: run one job in a launch folder
(its sqlite MLflow store lands there), fail loudly with its stderr, read its runs back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_train(args: list[str], launch_dir: Path, env: dict | None = None) -> float:
    """Wall seconds of `python train.py ARGS` run in `launch_dir` (raises with its stderr on failure)."""
    cmd = [sys.executable, str(REPO / "train.py"), *args]
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
