"""SIGKILL mid-training, then resume: the resumed run matches one never interrupted."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from helpers.train import run_train, train_command


def _checkpoint(path):
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


@pytest.mark.e2e
def test_sigkill_mid_training_then_resume_matches_uninterrupted(tmp_path):
    args = ["epochs=4", "train.ema.enabled=true", "train.ema.decay=0.9", "train.clip_grad_norm=2.0"]
    straight = tmp_path / "straight"
    straight.mkdir()
    proc = run_train(args, straight)
    assert proc.returncode == 0, proc.stderr[-3000:]

    killed = tmp_path / "killed"
    killed.mkdir()
    cmd, env = train_command(args, killed)
    victim = subprocess.Popen(
        cmd, cwd=killed, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    target = killed / "run" / "checkpoints" / "epoch_0002.ckpt"
    deadline = time.time() + 300
    while not target.exists() and victim.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait()
    assert not (killed / "run" / "checkpoints" / "final.ckpt").exists(), "killed too late"

    proc = run_train(args + [f"resume={killed / 'run'}"], killed, run_dir="resumed")
    assert proc.returncode == 0, proc.stderr[-3000:]

    want = _checkpoint(straight / "run" / "checkpoints" / "epoch_0004.ckpt")
    got = _checkpoint(killed / "run" / "checkpoints" / "epoch_0004.ckpt")
    weights = [k for k in want if k.startswith(("conv", "fc"))]
    moments = [k for k in want if k.startswith("moments.")]
    emas = [k for k in want if k.startswith("ema.")]
    assert weights and moments and emas
    for group in (weights, moments, emas):
        for key in group:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
    client = MlflowClient(f"sqlite:///{killed}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    per_epoch = int(run.data.tags["batch.steps_per_epoch"])  # digits less its validation split
    assert got["global_step"] == want["global_step"] and int(got["step_num"]) == 4 * per_epoch

    assert run.info.status == "FINISHED"
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert steps == list(range(1, 4 * per_epoch + 1))  # continued at the right step, once each
    acc_steps = [m.step for m in client.get_metric_history(run.info.run_id, "val/acc_ema")]
    assert acc_steps == [per_epoch * e for e in range(1, 5)]
