"""Checkpoints and resume: exact-name restore, corrupt files skipped, resume=true in the newest
run dir (train.py's entry in this process). SIGKILL then resume: tests/e2e/test_resume.py."""

from __future__ import annotations

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from helpers.inprocess import TINY
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
    accs = client_of(tmp_path).get_metric_history(run.info.run_id, "val/acc")
    assert len(accs) == 4
    best = max(accs, key=lambda m: (m.value, -m.step))
    epoch = best.step // int(run.data.tags["batch.steps_per_epoch"])
    (kept,) = (run_dir / "checkpoints").glob("best_acc_*.ckpt")
    assert kept.name == f"best_acc_{best.value:.4f}_epoch_{epoch:04d}.ckpt"


def _weights(path):
    """A checkpoint's arrays through MindSpore's own reader, told the format explicitly."""
    fmt = "safetensors" if path.suffix == ".safetensors" else "ckpt"
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path), format=fmt).items()}


def test_checkpoint_files_are_read_in_the_format_their_suffix_names(tmp_path, caplog):
    """`.ckpt` and `.safetensors` hold the same arrays; the newest readable epoch wins whatever
    its format (a run resumed with the other format), a torn one is skipped; another suffix is
    refused by name."""
    from sporeflow.storage.checkpoints import file_format, final_weights, load_checkpoint_file

    _, _, step = trained_pair()
    epoch = {"epoch_num": 1, "step_num": 3}
    old = save_atomic(step, tmp_path / "epoch_0001.ckpt", append_dict=epoch)
    new = save_atomic(
        step, tmp_path / "epoch_0002.safetensors", append_dict={**epoch, "epoch_num": 2}
    )
    assert set(_weights(old)) == set(_weights(new))
    for key, value in _weights(old).items():
        if key != "epoch_num":
            np.testing.assert_array_equal(_weights(new)[key], value, err_msg=key)
    path, state = newest_complete_checkpoint(tmp_path)
    assert path == new and int(state["epoch_num"].asnumpy()) == 2
    (tmp_path / "epoch_0003.safetensors").write_bytes(new.read_bytes()[:100])
    assert newest_complete_checkpoint(tmp_path)[0] == new
    assert "skipping unreadable checkpoint" in caplog.text
    (tmp_path / "checkpoints").mkdir()
    final = save_atomic(step, tmp_path / "checkpoints" / "final.safetensors")
    assert final_weights(tmp_path) == final
    np.testing.assert_array_equal(
        load_checkpoint_file(final)["weight"].asnumpy(), _weights(old)["weight"]
    )
    with pytest.raises(CheckpointError, match=r"weights\.pt: not a checkpoint \(allowed suffixes"):
        file_format(tmp_path / "weights.pt")


def test_a_safetensors_run_resumes_like_an_uninterrupted_ckpt_run_and_is_evaluated_and_served(
    tmp_path,
):
    """callbacks.checkpoint.format=safetensors: every checkpoint the run writes (full, best,
    final, the model's weights) is a .safetensors file; resumed after its second of three epochs
    it ends with the weights, optimizer moments and EMA of an uninterrupted .ckpt run; eval.py
    reproduces its final/acc from it and the packaged model predicts what the .ckpt one does."""
    from sporeflow.serving.pyfunc import Classifier

    args = [*TINY, "train.ema.enabled=true", "train.ema.decay=0.9", "callbacks.best.keep=1"]
    straight, split = tmp_path / "straight", tmp_path / "split"
    for launch in (straight, split):
        launch.mkdir()
    proc = run_train([*args, "epochs=3"], straight)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sf = [*args, "callbacks.checkpoint.format=safetensors"]
    for extra in (["epochs=2"], ["epochs=3", f"resume={split / 'run'}"]):
        proc = run_train([*sf, *extra], split)
        assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = split / "run"
    assert not list(run_dir.rglob("*.ckpt"))
    names = {p.name for p in (run_dir / "checkpoints").iterdir()}
    assert {"epoch_0002.safetensors", "epoch_0003.safetensors", "final.safetensors"} <= names
    assert any(n.startswith("best_acc_") and n.endswith(".safetensors") for n in names)
    assert (run_dir / "model" / "weights.safetensors").is_file()
    want = _weights(straight / "run" / "checkpoints" / "epoch_0003.ckpt")
    got = _weights(run_dir / "checkpoints" / "epoch_0003.safetensors")
    groups = [[k for k in want if k.startswith(p)] for p in ("layer", "moments.", "ema.")]
    assert all(groups)
    for key in (k for group in groups for k in group):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)

    proc = run_train([f"source={run_dir}"], split, run_dir="eval", app="eval")
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = client_of(split)
    trained, evaluated = sorted(runs_of(split), key=lambda r: r.info.start_time)
    assert evaluated.data.tags["sporeflow.weights"] == str(
        run_dir / "checkpoints" / "final.safetensors"
    )
    assert evaluated.data.metrics["test/acc"] == trained.data.metrics["test/acc"]
    assert len(client.get_metric_history(trained.info.run_id, "val/acc")) == 3

    example = np.load(run_dir / "model" / "input_example.npy")
    served = Classifier(run_dir / "model").predict(example)
    like = Classifier(straight / "run" / "model").predict(example)
    np.testing.assert_allclose(served["probabilities"], like["probabilities"], rtol=1e-4, atol=1e-6)


def test_a_resume_past_a_lost_checkpoint_keeps_each_step_once_and_clears_the_old_ending(
    tmp_path,
):
    """The newest full checkpoint unreadable (a truncated epoch_0003): the resume trains epoch
    3 again from epoch 2's, and the run's history still has each step once (the store already
    has epoch 3's points); the FINISHED run keeps no reason it ended before."""
    args = [*TINY, "callbacks.checkpoint.keep_last=3"]
    first = run_train([*args, "epochs=3"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    (run,) = runs_of(tmp_path)
    client = client_of(tmp_path)
    client.set_tag(run.info.run_id, "sporeflow.failure", "Interrupted: SIGTERM (earlier)")
    lost = tmp_path / "run" / "checkpoints" / "epoch_0003.ckpt"
    lost.write_bytes(lost.read_bytes()[:100])
    resumed = run_train(
        [*args, "epochs=4", f"resume={tmp_path / 'run'}"], tmp_path, run_dir="again"
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (
        "skipping unreadable checkpoint"
        in resumed.stderr + (tmp_path / "again" / "train.log").read_text()
    )
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"
    assert "sporeflow.failure" not in run.data.tags
    per_epoch = 4  # 128 images, batch 32
    for key in ("train/loss", "val/acc", "cost/passes"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, sorted(steps))
    assert [m.step for m in client.get_metric_history(run.info.run_id, "val/acc")] == [
        per_epoch * e for e in (1, 2, 3, 4)
    ]


@pytest.mark.parametrize("trained, asked", [(1, 1), (2, 1)])
def test_a_resume_with_no_epoch_left_says_nothing_is_left_to_train(tmp_path, trained, asked):
    """issue 60 item 6: `resume=` on a run that trained its epochs logged `epochs 2..1` and
    printed `nan images/s`. The same epochs and fewer: one line says nothing is left, the
    result line has no NaN throughput, and the run records none."""
    first = run_train([*TINY, f"epochs={trained}"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    run_dir = tmp_path / "run"
    resumed = run_train([*TINY, f"epochs={asked}", f"resume={run_dir}"], tmp_path, run_dir="again")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    log = [line for f in sorted(tmp_path.rglob("train.log")) for line in f.read_text().splitlines()]
    (said,) = [line for line in log if "nothing left to train" in line]
    assert said.endswith(
        f"stage train: nothing left to train: {run_dir}/checkpoints/epoch_{trained:04d}.ckpt is at "
        f"epoch {trained} of its {asked} (a larger epochs= trains on); its weights are evaluated "
        "and exported again"
    ), said
    assert sum("stage train: epochs" in line for line in log) == 1, log  # the first run's alone
    (result,) = [
        line for line in resumed.stderr.splitlines() if line.startswith("[sporeflow] train:")
    ]
    assert "nan" not in result and "nothing left to train (batch 32" in result, result
    (run,) = runs_of(tmp_path)
    speeds = client_of(tmp_path).get_metric_history(run.info.run_id, "final/images_per_sec")
    assert [np.isfinite(m.value) for m in speeds] == [True], speeds
