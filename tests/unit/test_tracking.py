"""The MLflow tracker against a real sqlite store and a real (unreachable) HTTP address."""

from __future__ import annotations

import logging
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from mlflow.tracking import MlflowClient

from sporeflow.tracking.tracker import Tracker, default_uri, flatten, resolve_uri


def test_flatten_nests_and_stringifies():
    flat = flatten({"optimizer": {"lr": 0.1, "nested": {"a": [1, 2]}}, "epochs": 3})
    assert flat == {"optimizer.lr": "0.1", "optimizer.nested.a": "[1, 2]", "epochs": "3"}


def test_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert resolve_uri(None, tmp_path) == "sqlite:////elsewhere.db"
    assert resolve_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"


def test_params_metrics_artifacts_round_trip(tmp_path):
    cfg = SimpleNamespace(uri=None, experiment_name="t", enabled=True)
    tracker = Tracker.from_config(cfg, tmp_path)
    assert tracker.uri == default_uri(tmp_path)
    run = tracker.start_run("r", tags={"stage": "train"})
    params = {f"p{i}": i for i in range(150)}  # more than one MLflow batch
    run.log_params(params)
    for step in range(1, 1201):  # more than one metric batch
        run.log_metrics({"train/loss": 1.0 / step}, step)
    (tmp_path / "w.ckpt").write_bytes(b"weights")
    run.log_artifact(tmp_path / "w.ckpt", "checkpoints")
    run.end("FINISHED")

    client = MlflowClient(tracker.uri)
    got = client.get_run(run.run_id)
    assert got.info.status == "FINISHED"
    assert got.data.params["p149"] == "149" and len(got.data.params) == 150
    history = client.get_metric_history(run.run_id, "train/loss")
    assert [m.step for m in history] == list(range(1, 1201))
    assert got.data.tags["stage"] == "train"
    assert [a.path for a in client.list_artifacts(run.run_id, "checkpoints")] == [
        "checkpoints/w.ckpt"
    ]
    location = client.get_experiment_by_name("t").artifact_location
    assert location == (tmp_path.resolve() / "mlartifacts" / "t").as_uri()


def test_unreachable_server_is_a_warning_not_an_error(tmp_path, caplog):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = SimpleNamespace(uri=f"http://127.0.0.1:{port}", experiment_name="t", enabled=True)
    tracker = Tracker.from_config(cfg, tmp_path)
    with caplog.at_level(logging.WARNING):
        run = tracker.start_run("r")
        run.log_params({"a": 1})
        run.log_metrics({"m": 1.0}, 1, flush=True)
        run.end("FINISHED")
    assert not tracker.enabled and run.run_id is None
    assert sum("tracking disabled" in r.message for r in caplog.records) == 1


def test_failure_midway_disables_without_raising(tmp_path):
    cfg = SimpleNamespace(uri=None, experiment_name="t", enabled=True)
    tracker = Tracker.from_config(cfg, tmp_path)
    run = tracker.start_run("r")
    run.log_artifact(tmp_path / "does-not-exist.bin")  # MLflow raises; the tracker must not
    assert not tracker.enabled
    run.log_metrics({"m": 1.0}, 1, flush=True)
    run.end("FINISHED")


def hold_write_lock(db: Path, seconds: float) -> subprocess.Popen:
    """Another process takes the sqlite database's write lock and keeps it `seconds`."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(float(sys.argv[2])); "
            "c.execute('COMMIT')",
            str(db),
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


def test_a_store_busy_past_the_retries_loses_that_write_and_stays_on(tmp_path, monkeypatch, caplog):
    """README "When things go wrong": busy past the retry budget, that one write is lost with a
    warning; tracking stays on and the next write lands. The budget is shortened to one try (the
    product's own constant); MLflow's sqlite store itself waits up to 20 s per try
    (busy_timeout), so the other process holds a real write lock for 22 s."""
    from sporeflow.tracking import tracker as tracking

    monkeypatch.setattr(tracking, "LOCKED_RETRIES", ())
    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", "busy")
    run = tracker.start_run("r")
    holder = hold_write_lock(tmp_path / "mlflow.db", 22.0)
    with caplog.at_level(logging.WARNING):
        run.log_metrics({"lost": 1.0}, 0, flush=True)
    holder.wait(timeout=30)
    assert "still busy after" in caplog.text and "tracking stays on" in caplog.text
    assert tracker.enabled
    run.log_metrics({"kept": 2.0}, 1, flush=True)
    client = MlflowClient(tracker.uri)
    assert client.get_metric_history(run.run_id, "lost") == []
    assert [m.value for m in client.get_metric_history(run.run_id, "kept")] == [2.0]
