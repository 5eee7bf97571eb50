"""Every documented command once in a fresh process, in a launch folder whose path holds a space,
'?', '#', '%' and a non-ASCII letter.

A fresh process walks paths the in-process tier cannot see: MindSpore is set up there once for
the whole session, so a kernel run before `set_device` (fine-tuning's check did that: issue 60)
only fails here. And the folder's name reaches other programs' rules: MindSpore's file names
(the MINDIR export), the store's URI (SQLAlchemy reads '?' and '#'), msrun's command line
(Hydra's override grammar). One small job each; the first run is shared by the others.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from helpers.store import only_run
from helpers.train import REPO, TRAIN, multirun_command, sporeflow_cli
from sporeflow.core.uris import sqlite_uri
from sporeflow.launch.msrun import override

pytestmark = pytest.mark.e2e

ODD_NAME = "launch dir ?#%é"  # every character issue 60 reported, in one folder


def _run(cwd, *argv, timeout=600) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, *map(str, argv)],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _env() -> dict:
    from helpers.train import train_command

    return {**train_command([], REPO)[1], "MLFLOW_TRACKING_URI": ""}


def _train(cwd, run_dir: str, *args: str) -> subprocess.CompletedProcess:
    return _run(
        cwd,
        TRAIN,
        override("hydra.run.dir", cwd / run_dir),
        "callbacks.progress_bar=false",
        *args,
    )


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """(the launch folder, the run dir of `python train.py debug=quick` run in it)."""
    cwd = tmp_path_factory.mktemp("fresh") / ODD_NAME
    cwd.mkdir()
    _train(cwd, "first", "debug=quick")
    return cwd, cwd / "first"


def _runs(cwd):
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=sqlite_uri(cwd / "mlflow.db"))
    return client.search_runs(
        [e.experiment_id for e in client.search_experiments()], max_results=100
    )


def test_a_plain_run_writes_its_model_and_its_store_inside_the_folder(odd):
    cwd, first = odd
    assert (first / "model" / "network.mindir").stat().st_size > 0
    assert not (cwd.parent / "launch dir ").exists()  # SQLAlchemy's cut at '?' before the fix
    _, run = only_run(sqlite_uri(cwd / "mlflow.db"))
    assert run.info.status == "FINISHED" and run.data.metrics["final/acc"] > 0.3


def test_fine_tuning_from_a_run_works_in_a_fresh_process(odd):
    cwd, first = odd
    _train(cwd, "tuned", "debug=quick", override("train.init_from", first))
    tuned = [r for r in _runs(cwd) if r.data.tags.get("sporeflow.init_from")]
    assert len(tuned) == 1 and tuned[0].info.status == "FINISHED"


def test_resume_continues_a_run_for_more_epochs(odd):
    import shutil

    cwd, first = odd
    copy = cwd / "continued"
    shutil.copytree(first, copy)
    _train(cwd, "continued", "debug=quick", "epochs=2", override("resume", copy))
    assert (copy / "checkpoints" / "epoch_0002.ckpt").is_file()


def test_eval_and_predict_read_the_run(odd):
    cwd, first = odd
    proc = _run(cwd, REPO / "eval.py", override("source", first))
    assert "acc=" in proc.stderr + proc.stdout
    images = cwd / "my images #1"
    images.mkdir()
    for i, mode in enumerate(("L", "RGB", "RGBA")):
        Image.fromarray(np.full((28, 28, 3), 40 * i, np.uint8)).convert(mode).save(
            images / f"{i}.png"
        )
    done = sporeflow_cli(cwd, "predict", str(first), str(images))
    assert done.returncode == 0, done.stderr[-2000:]
    assert len((cwd / "predictions.csv").read_text().splitlines()) == 1 + 3


def test_a_sweep_and_a_dim_reduce_pipeline(odd):
    cwd, _ = odd
    cmd, _ = multirun_command(cwd, "debug=quick", "optimizer.lr=0.01,0.02")
    cmd[cmd.index(next(a for a in cmd if a.startswith("hydra.sweep.dir=")))] = override(
        "hydra.sweep.dir", cwd / "multirun"
    )
    _run(cwd, *cmd[1:])
    _train(cwd, "pipeline", "debug=dim_reduce", "boost.baselines=[]")
    assert (cwd / "pipeline" / "stage2" / "model" / "network.mindir").is_file()


def test_data_parallel_workers_start_under_msrun(odd):
    cwd, _ = odd
    _train(cwd, "data2", "debug=quick", "parallel=data2")
    assert (cwd / "data2" / "checkpoints" / "rank_0" / "final.ckpt").is_file()


def test_the_python_api_in_a_new_interpreter(odd):
    cwd, _ = odd
    code = (
        "import sporeflow\n"
        "r = sporeflow.run(['debug=quick', 'callbacks.progress_bar=false'])\n"
        "assert r.metrics['final/acc'] > 0.3, r.metrics\n"
        "print('API', r.run_id)\n"
    )
    proc = _run(cwd, "-c", code)
    assert "API " in proc.stdout and "None" not in proc.stdout
