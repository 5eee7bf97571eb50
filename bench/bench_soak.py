"""A soak (issue 36 item 6, BENCHMARKS table 16): one default job (LeNet-5 on digits, tracked
in the launch dir's sqlite store, checkpoints every epoch) trains for MINUTES, and every INTERVAL seconds the
trainer's and its tracking writer's resident memory and open files, the run dir's checkpoints,
its journal, the rest of it and the MLflow store are sampled. After a warm-up (the first
quarter) each quantity's growth is fitted per hour (least squares) and set against what is
expected to grow: the journal and the store by the records (per epoch), the checkpoints not at
all (the last k and the best k are kept). The job is then stopped with SIGINT (it ends KILLED).
Usage: python bench/bench_soak.py [minutes] [interval_s]
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import psutil

from trainjob import REPO

os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
COLUMNS = (
    "trainer_rss_mb",
    "writer_rss_mb",
    "trainer_fds",
    "writer_fds",
    "checkpoints_mb",
    "journal_mb",
    "other_run_dir_mb",
    "store_mb",
    "epoch",
)


def tree_mb(paths) -> float:
    return sum(p.stat().st_size for p in paths if p.is_file()) / 2**20


def sample(trainer: psutil.Process, launch: Path) -> dict[str, float]:
    """One row of the soak's table (a process not found counts 0)."""
    writers = [
        p for p in trainer.children(recursive=True) if "sporeflow.tracking.writer" in p.cmdline()
    ]
    run_dir = launch / "run"
    files = list(run_dir.rglob("*"))
    ckpt = [p for p in files if "checkpoints" in p.parts]
    journal = [p for p in files if "tracking" in p.parts]
    epochs = sorted((run_dir / "checkpoints").glob("epoch_*.ckpt"))
    return {
        "trainer_rss_mb": trainer.memory_info().rss / 2**20,
        "writer_rss_mb": sum(w.memory_info().rss for w in writers) / 2**20,
        "trainer_fds": trainer.num_fds(),
        "writer_fds": sum(w.num_fds() for w in writers),
        "checkpoints_mb": tree_mb(ckpt),
        "journal_mb": tree_mb(journal),
        "other_run_dir_mb": tree_mb(set(files) - set(ckpt) - set(journal)),
        "store_mb": tree_mb([launch / "mlflow.db", *launch.glob("mlartifacts/**/*")]),
        "epoch": int(epochs[-1].stem.split("_")[1]) if epochs else 0,
    }


def per_hour(times: np.ndarray, values: np.ndarray) -> float:
    """Least-squares slope of values over time, per hour."""
    return float(np.polyfit(times / 3600.0, values, 1)[0]) if len(times) > 1 else float("nan")


def main() -> None:
    minutes = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    interval = float(sys.argv[2]) if len(sys.argv) > 2 else 60.0
    with tempfile.TemporaryDirectory() as tmp:
        launch = Path(tmp)
        cmd = [
            sys.executable,
            str(REPO / "train.py"),
            "epochs=100000",
            "callbacks.progress_bar=false",
            "hydra.run.dir=run",
        ]
        env = {**os.environ, "MLFLOW_TRACKING_URI": ""}
        job = subprocess.Popen(cmd, cwd=launch, env=env, stderr=subprocess.PIPE, text=True)
        trainer = psutil.Process(job.pid)
        rows, times, start = [], [], time.monotonic()
        try:
            while time.monotonic() - start < minutes * 60 and job.poll() is None:
                time.sleep(interval)
                times.append(time.monotonic() - start)
                rows.append(sample(trainer, launch))
                row = rows[-1]
                print(
                    f"  {times[-1] / 60:5.1f} min  "
                    + "  ".join(f"{k}={row[k]:.1f}" for k in COLUMNS),
                    flush=True,
                )
        finally:
            job.send_signal(signal.SIGINT)
            _, err = job.communicate(timeout=300)
    if len(rows) < 4:
        raise RuntimeError(f"the job ended early (exit {job.returncode}):\n{err[-3000:]}")
    report(np.array(times), rows, minutes)


def report(times: np.ndarray, rows: list[dict[str, float]], minutes: float) -> None:
    """Growth per hour after the warm-up, and per epoch where records are expected to grow."""
    warm = len(rows) // 4
    t = times[warm:]
    epochs = np.array([r["epoch"] for r in rows[warm:]], dtype=float)
    epochs_per_hour = per_hour(t, epochs)
    print(
        f"\nsoak: default job (LeNet-5 / digits), {minutes:.0f} min, {len(rows)} samples, "
        f"{os.cpu_count()} cores; growth fitted after the first {times[warm - 1] / 60:.1f} min, "
        f"{epochs_per_hour:.0f} epochs/h:"
    )
    print(f"  {'':18s} {'first':>9s} {'last':>9s} {'per hour':>10s} {'per epoch':>10s}")
    for key in COLUMNS[:-1]:
        values = np.array([r[key] for r in rows[warm:]])
        slope = per_hour(t, values)
        print(
            f"  {key:18s} {values[0]:9.2f} {values[-1]:9.2f} {slope:10.3f} "
            f"{slope / epochs_per_hour * 1024:9.2f}K"
        )


if __name__ == "__main__":
    main()
