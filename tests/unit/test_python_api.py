"""sporeflow from Python (issue 49): `run`, `sweep`, `results` and `load` do what their
commands do, in this process, and return what the run recorded: checked against the MLflow
store read with MLflow's own client, and against the commands' own output."""

from __future__ import annotations

import csv
import re
import subprocess
import sys

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import sporeflow
from helpers.inprocess import TINY, shared_writer_named, sporeflow_here, train_cli

QUICK = [*TINY, "epochs=1"]


def test_import_sporeflow_loads_neither_mindspore_nor_mlflow():
    """The API is imported at first use: the ISA choice must reach the environment first."""
    probe = "import sys, sporeflow; print(sorted({'mindspore', 'mlflow'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_run_with_tracking_off_returns_the_metrics_the_console_printed(
    tmp_path, monkeypatch, capsys
):
    """Nothing is recorded, yet the job's result comes back: what the trainer returned, not a
    read of a store (issue 62)."""
    monkeypatch.chdir(tmp_path)
    result = sporeflow.run([*QUICK, "tracking.enabled=false"])
    said = capsys.readouterr().err
    line = next(row for row in said.splitlines() if row.startswith("[sporeflow] train: "))
    printed = {
        f"{split}/{name}": float(value)
        for split, name, value in re.findall(r"(val|test) (acc|loss)=([0-9.]+)", line)
    }
    assert set(printed) == {"val/acc", "val/loss", "test/acc", "test/loss"}
    for key, value in printed.items():  # the console prints 4 decimals
        recorded = result.metrics["final/" + key if key.startswith("val/") else key]
        assert round(recorded, 4) == value
    assert result.objective == result.metrics["final/val/acc"]
    assert result.run_id is None and not (tmp_path / "mlflow.db").exists()
    assert result.weights == result.run_dir / "checkpoints" / "final.ckpt"
    assert result.weights.is_file() and result.metrics["cost/passes"] > 0


def test_run_returns_what_its_mlflow_run_recorded_and_its_weights_predict(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with shared_writer_named():
        result = sporeflow.run(QUICK)
    recorded = MlflowClient(result.uri).get_run(result.run_id)
    assert result.uri == f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert (
        result.metrics["final/val/acc"]
        == recorded.data.metrics["final/val/acc"]
        == result.objective
    )
    assert result.run_dir.parent.parent == tmp_path / "outputs"
    assert recorded.data.tags["run_dir"] == str(result.run_dir)
    assert result.weights == result.run_dir / "checkpoints" / "final.ckpt"
    assert result.stages == {} and result.gain is None  # a plain run
    for ref in (result.run_id, result.run_dir):  # read back from the store, as a viewer would
        again = sporeflow.results(run=ref)
        assert (again.run_id, again.run_dir, again.weights) == (
            result.run_id,
            result.run_dir,
            result.weights,
        )
        assert again.metrics == result.metrics and again.objective == result.objective
    with pytest.raises(sporeflow.ConfigError, match=r"^run=0{32}: no such run in experiment"):
        sporeflow.results(run="0" * 32)

    images = np.random.default_rng(0).integers(0, 256, (5, 8, 8), dtype=np.uint8)
    np.save(tmp_path / "batch.npy", images)
    trained = sporeflow.load(result.run_id)  # by its MLflow id, as eval.py source= takes it
    from_array, from_file = trained.predict(images), trained.predict(tmp_path / "batch.npy")
    said = sporeflow_here(tmp_path, "predict", str(result.run_dir), "batch.npy", "--out", "p.csv")
    assert said.returncode == 0, said.stderr
    with open(tmp_path / "p.csv", newline="") as f:
        rows = list(csv.reader(f))[1:]
    assert from_file.names == tuple(r[0] for r in rows)
    assert from_array.names == tuple(str(i) for i in range(5))
    for got in (from_array, from_file):
        assert (got.labels == [int(r[1]) for r in rows]).all()
        assert got.probabilities == pytest.approx(
            np.array([[float(p) for p in r[2:]] for r in rows]), rel=1e-5, abs=1e-6
        )


def test_a_bad_override_raises_the_line_train_py_prints_and_nothing_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, printed = train_cli([*QUICK, "boost.stage2_epochs=3"], tmp_path)
    assert code == 2
    with pytest.raises(sporeflow.ConfigError) as refused:
        sporeflow.run([*QUICK, "boost.stage2_epochs=3"])
    assert str(refused.value) == printed.strip()
    assert not (tmp_path / "outputs").exists()
    with pytest.raises(sporeflow.ConfigError) as composed:
        sporeflow.compose([*QUICK, "boost.stage2_epochs=3"])
    assert str(composed.value) == printed.strip()
    plain = sporeflow.compose([*TINY, "debug=dim_reduce"])  # validated: the stages' config
    assert plain.boost.name.value == "dim_reduce" and plain.dataset.image_size == 8
    with pytest.raises(sporeflow.ConfigError, match="several values run a sweep, which needs"):
        sporeflow.run([*QUICK, "optimizer.lr=0.01,0.05"])


def test_a_sweep_returns_its_jobs_and_the_decision_compare_prints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with shared_writer_named():
        swept = sporeflow.sweep([*QUICK, "optimizer.lr=0.01,0.05"])
    parent = MlflowClient(swept.uri).get_run(swept.run_id)
    assert swept.decision == parent.data.tags["sporeflow.decision"]
    assert sorted(swept.jobs["optimizer.lr"]) == ["0.01", "0.05"]
    assert set(swept.jobs["status"]) == {"FINISHED"}
    for _, job in swept.jobs.iterrows():
        recorded = MlflowClient(swept.uri).get_run(job["run_id"]).data.metrics
        assert job["final/val/acc"] == recorded["final/val/acc"]
    assert list(swept.points["verdict"])[0] in ("winner", "leading", "tie")
    assert swept.leader == parent.data.tags["sporeflow.leader"]  # the one rule, one answer
    assert swept.front.empty and "on_front" in swept.front.columns, "one objective: no front"
    again = sporeflow.results()  # latest, from the store alone
    assert again.run_id == swept.run_id and again.verdict == swept.verdict
    compared = sporeflow_here(tmp_path, "compare", "--sweep", "latest")
    said = [swept.verdict, swept.leader_line, swept.reported, swept.answer]
    said = [line for line in said if line]
    assert compared.returncode == 0 and compared.stdout.splitlines()[-len(said) :] == said
    assert swept.leader == "none" or (
        swept.reported.startswith("reported: ") and "the estimate nothing chose" in swept.reported
    )
    with pytest.raises(sporeflow.ConfigError, match="sweep=nope: no sweep run"):
        sporeflow.results("nope")
    name = parent.data.tags["mlflow.runName"]  # what the sweep's first console line names
    assert sporeflow.results(name).run_id == swept.run_id
    for unknown in ("sweep-1999-01-01-00-00-00", f"{name}' or attributes.run_name != '"):
        with pytest.raises(sporeflow.ConfigError, match="no sweep run"):
            sporeflow.results(unknown)
