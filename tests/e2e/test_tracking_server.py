"""Tracking through a real `mlflow server` on 127.0.0.1 (HTTP), and the server going away."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.train import run_train

pytestmark = pytest.mark.e2e


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def mlflow_server(tmp_path):
    port = free_port()
    store = tmp_path / "server"
    store.mkdir()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{store}/mlflow.db",
            "--artifacts-destination",
            str(store / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.time() + 90
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{uri}/health", timeout=2) as resp:
                if resp.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("mlflow server did not start within 90 s")
    yield uri, proc
    proc.terminate()
    proc.wait(timeout=30)


def test_run_tracked_over_http(tmp_path, mlflow_server):
    uri, _ = mlflow_server
    proc = run_train(["epochs=2", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not (tmp_path / "mlflow.db").exists()
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["epochs"] == "2"
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 2 * 45
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {
        "checkpoints/final.ckpt"
    }


def test_server_gone_training_goes_on(tmp_path, mlflow_server):
    uri, server = mlflow_server
    server.terminate()
    server.wait(timeout=30)
    proc = run_train(["epochs=1", f"tracking.uri={uri}"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout + proc.stderr  # Hydra sends log records to stdout and <run dir>/train.log
    assert "MLflow tracking disabled" in out and "training continues" in out
    assert (tmp_path / "run" / "checkpoints" / "final.ckpt").is_file()
