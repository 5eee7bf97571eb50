"""A refused command as a real process: exit 2, one line, no traceback, and nothing left
behind - not even Hydra's dated run dir. The whole table of refusals runs in process
(tests/unit/test_refusals.py)."""

from __future__ import annotations

import pytest

from helpers.train import run_train

pytestmark = pytest.mark.e2e


def test_a_refused_command_leaves_no_dated_run_dir(tmp_path):
    """With Hydra's own outputs/<date>/<time>_<uid> dir: neither it nor its date folder stays."""
    proc = run_train(["optimizer.lr=fast", "epochz=3"], tmp_path, run_dir=None)
    assert proc.returncode == 2, proc.stderr[-2000:]
    hint = "  (python train.py --help lists groups and options)"
    assert proc.stderr.startswith("Config error: ") and proc.stderr.endswith(hint + "\n")
    lines = proc.stderr.removeprefix("Config error: ").removesuffix(hint + "\n").splitlines()
    assert sorted(lines) == [
        "epochz: no such key; did you mean epochs?; allowed under the top level: "
        + proc.stderr.split("allowed under the top level: ")[1].split("\n")[0].split("  (")[0],
        "optimizer.lr='fast': must be a number (sporeflow.nn.optimizers.momentum takes lr: a number)",
    ]
    assert not list((tmp_path / "outputs").rglob("*"))
