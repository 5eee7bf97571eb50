"""`python train.py` as its own process where that is the point: what the training process
imports. The rest of the default job's checks run in process (tests/unit/test_train_job.py)."""

from __future__ import annotations

import subprocess

import pytest

from helpers.store import only_run
from helpers.train import train_command

pytestmark = pytest.mark.e2e


def test_the_training_process_of_the_default_job_never_imports_mlflow(tmp_path):
    """Start-up: the trainer journals, its writer process talks to MLflow. The default job run
    in-process under a probe that reports, at exit, whether MLflow was ever imported; the run
    is in the store all the same."""
    import sys

    cmd, env = train_command([], tmp_path, env={"MLFLOW_TRACKING_URI": ""})
    probe = (
        "import runpy, sys\n"
        "sys.argv = sys.argv[1:]\n"
        "try:\n"
        "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
        "finally:\n"
        "    print('PROBE mlflow imported:', any(m.split('.')[0] == 'mlflow' for m in sys.modules), file=sys.stderr)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", probe, *cmd[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "PROBE mlflow imported: False" in proc.stderr
    _, run = only_run(f"sqlite:///{tmp_path}/mlflow.db")
    assert run.info.status == "FINISHED" and run.data.metrics["final/val/acc"] > 0.5
