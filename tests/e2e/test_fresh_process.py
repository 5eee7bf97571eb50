"""Every documented command once in a fresh process, in a launch folder whose path holds a space,
'?', '#', '%' and a non-ASCII letter (helpers.train.ODD_FOLDER).

A fresh process walks paths the in-process tier cannot see: MindSpore is set up there once for
the whole session, so a kernel run before `set_device` (fine-tuning's check did that: issue 60)
only fails here. And the folder's name reaches other programs' rules: MindSpore's file names
(the MINDIR export), the store's URI (SQLAlchemy reads '?' and '#'), Hydra's override grammar.
One small job each; the first run is shared by the others. A sweep and a dim-reduce pipeline run
in such a folder in the shared `rho_sweep` (tests/e2e/conftest.py), msrun's data-parallel
workers in test_parallel.py::test_data2_matches_standalone_on_the_combined_batch.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

from helpers.shell import plain_shell
from helpers.store import client_of, only_run
from helpers.train import ODD_FOLDER, REPO, run_train, sporeflow_cli, train_command
from sporeflow.core.uris import sqlite_uri
from sporeflow.launch.msrun import override
from sporeflow.runtime import mindspore_log

pytestmark = pytest.mark.e2e


def _run(cwd, *argv) -> subprocess.CompletedProcess:
    """`python ARGV` in `cwd` to its end, as train.py is run (helpers.train's environment)."""
    env = {**train_command([], cwd)[1], "MLFLOW_TRACKING_URI": ""}
    proc = subprocess.run(
        [sys.executable, *map(str, argv)], cwd=cwd, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _train(cwd, run_dir: str, *args: str) -> None:
    proc = run_train([*args], cwd, env={"MLFLOW_TRACKING_URI": ""}, run_dir=run_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def odd(tmp_path_factory):
    """(the launch folder, the run dir of `python train.py debug=quick` run in it from a shell
    with only PATH and HOME set: nothing of the runner's environment helps it)."""
    cwd = tmp_path_factory.mktemp("fresh") / ODD_FOLDER
    cwd.mkdir()
    cmd, _ = train_command(["debug=quick"], cwd, "first")
    proc = subprocess.run(cmd, cwd=cwd, env=plain_shell(), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd, cwd / "first"


def test_mindspore_logs_a_run_whose_folder_name_it_refuses(odd):
    """MindSpore's logger refuses a log folder named with ' ', '?', '#', '%' or 'é' (issue 75):
    the run's `mindspore_log` links to a folder it accepts, where its log files are."""
    _, first = odd
    link = first / "mindspore_log"
    assert link.is_symlink() and mindspore_log.LEGAL_FOLDER.match(str(link.resolve()))
    assert (link / "rank_0" / "logs").is_dir(), "MindSpore's logger made its folder there"


def _runs(cwd):
    client = client_of(cwd)
    return client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_a_plain_run_writes_its_model_and_its_store_inside_the_folder(odd):
    cwd, first = odd
    assert (first / "model" / "network.mindir").stat().st_size > 0
    assert not (cwd.parent / ODD_FOLDER.split("?")[0]).exists()  # SQLAlchemy cut at '?'
    _, run = only_run(sqlite_uri(cwd / "mlflow.db"))
    assert run.info.status == "FINISHED" and run.data.metrics["final/val/acc"] > 0.3


def test_fine_tuning_from_a_run_works_in_a_fresh_process(odd):
    cwd, first = odd
    _train(cwd, "tuned", "debug=quick", override("train.init_from", first))
    tuned = [r for r in _runs(cwd) if r.data.tags.get("sporeflow.init_from")]
    assert len(tuned) == 1 and tuned[0].info.status == "FINISHED"


def test_resume_continues_a_run_for_more_epochs(odd):
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


def test_the_python_api_in_a_new_interpreter(odd):
    cwd, _ = odd
    code = (
        "import sporeflow\n"
        "r = sporeflow.run(['debug=quick', 'callbacks.progress_bar=false'])\n"
        "assert r.metrics['final/val/acc'] > 0.3, r.metrics\n"
        "print('API', r.run_id)\n"
    )
    proc = _run(cwd, "-c", code)
    assert "API " in proc.stdout and "None" not in proc.stdout
