"""Checkpoints and resume: exact-name restore, corrupt files skipped, resume=true in the newest
run dir (train.py's entry in this process). SIGKILL then resume: tests/e2e/test_resume.py."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from helpers.inprocess import run_train_here as run_train
from helpers.store import client_of, runs_of
from sporeflow.core.errors import CheckpointError
from sporeflow.storage.checkpoints import (
    newest_complete_checkpoint,
    restore_exact,
    save_atomic,
)
from sporeflow.storage.run_marker import find_resume_dir


def trained_pair(steps=3, seed=0):
    ms.set_seed(seed)
    net = nn.Dense(5, 3)
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    step = nn.TrainOneStepCell(
        nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")), opt
    )
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        step(
            Tensor(rng.normal(size=(4, 5)).astype(np.float32)),
            Tensor(rng.integers(0, 3, 4).astype(np.int32)),
        )
    return net, opt, step


def test_restore_exact_keeps_weights_and_moments_apart(tmp_path):
    ms.set_context(mode=ms.GRAPH_MODE)
    _, _, step = trained_pair()
    path = save_atomic(step, tmp_path / "epoch_0001.ckpt", append_dict={"epoch_num": 1})
    state = ms.load_checkpoint(str(path))
    net, opt, _ = trained_pair(steps=0, seed=1)
    restore_exact(state, net, opt)
    np.testing.assert_array_equal(net.weight.asnumpy(), state["weight"].asnumpy())
    np.testing.assert_array_equal(opt.moments[0].asnumpy(), state["moments.weight"].asnumpy())
    assert not np.allclose(state["weight"].asnumpy(), state["moments.weight"].asnumpy())


def test_restore_exact_rejects_another_network(tmp_path):
    _, _, step = trained_pair()
    state = ms.load_checkpoint(str(save_atomic(step, tmp_path / "a.ckpt")))
    other = nn.Dense(5, 4)
    with pytest.raises(CheckpointError, match="weight: checkpoint shape"):
        restore_exact(state, other)
    with pytest.raises(CheckpointError, match="lacks"):
        restore_exact({}, other)


def test_corrupt_newest_checkpoint_is_skipped(tmp_path, caplog):
    _, _, step = trained_pair()
    save_atomic(step, tmp_path / "epoch_0001.ckpt", append_dict={"epoch_num": 1})
    good = (tmp_path / "epoch_0001.ckpt").read_bytes()
    (tmp_path / "epoch_0002.ckpt").write_bytes(good[: len(good) // 2])  # truncated by a crash
    (tmp_path / ".epoch_0003.ckpt.123.tmp").write_bytes(good)  # an unfinished atomic save
    path, state = newest_complete_checkpoint(tmp_path)
    assert path.name == "epoch_0001.ckpt" and int(state["epoch_num"].asnumpy()) == 1
    assert "skipping unreadable checkpoint" in caplog.text


def test_no_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(CheckpointError, match="no readable epoch_"):
        newest_complete_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="does not exist"):
        find_resume_dir(str(tmp_path / "nope"), tmp_path)
    with pytest.raises(CheckpointError, match="no sporeflow run"):
        find_resume_dir(True, tmp_path)


def _checkpoint(path):
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


def test_resume_true_goes_on_in_the_newest_run_dir_with_its_best_checkpoints(tmp_path):
    """`resume=true` continues the newest run under outputs/ in that run's own dir: no stray new
    run dir, its log goes on in its train.log, its own .hydra stays, one MLflow run; with
    callbacks.best.keep=1 one best checkpoint remains, the best of every epoch."""
    first = run_train(["epochs=2", "callbacks.best.keep=1"], tmp_path, run_dir=None)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = [p.parent for p in tmp_path.glob("outputs/*/*/.sporeflow_claim.json")]
    config_before = (run_dir / ".hydra" / "config.yaml").read_text()
    resumed = run_train(
        ["epochs=4", "callbacks.best.keep=1", "resume=true"], tmp_path, run_dir=None
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert [p.parent for p in tmp_path.glob("outputs/*/*/.sporeflow_claim.json")] == [run_dir]
    assert (run_dir / ".hydra" / "config.yaml").read_text() == config_before
    assert len(list((run_dir / ".hydra").glob("resume-*/overrides.yaml"))) == 1
    assert (run_dir / "train.log").read_text().count("stage train: epochs") == 2
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"
    accs = client_of(tmp_path).get_metric_history(run.info.run_id, "eval/acc")
    assert len(accs) == 4
    best = max(accs, key=lambda m: (m.value, -m.step))
    epoch = best.step // 45
    (kept,) = (run_dir / "checkpoints").glob("best_acc_*.ckpt")
    assert kept.name == f"best_acc_{best.value:.4f}_epoch_{epoch:04d}.ckpt"
