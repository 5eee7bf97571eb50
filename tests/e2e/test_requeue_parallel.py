"""A parallel job warned before its SLURM time limit (issue 36 item 3): the launcher runs in
this process as sporeflow's SLURM launcher arms it, the workers are real msrun processes.
The warning reaches the launcher only; its workers agree on one step, each writes its own
checkpoint of it, and the requeued job (SLURM_RESTART_COUNT) continues every rank from there,
ending with the weights and metric history of the job never stopped. The scheduler's side
(`scontrol requeue`, the sweep waiting) is tests/e2e/test_slurm_cluster.py's."""

from __future__ import annotations

import os
import signal

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from helpers.inprocess import TINY, run_train_here
from helpers.requeue import armed, slurm_env, warn_launcher_at
from helpers.store import runs_of
from helpers.train import REPO
from sporeflow.core import signals
from sporeflow.launch.msrun import requeue_file

pytestmark = pytest.mark.e2e

JOB = [*TINY, "parallel=data2", "epochs=3", "seed=5"]  # 4 steps of 2 x 16 an epoch


def workers_env(restarts: int) -> dict:
    """SLURM's environment, and the tests' helpers importable by the workers (the hook)."""
    return {
        **slurm_env(restarts),
        "PYTHONPATH": f"{REPO / 'tests'}:{os.environ.get('PYTHONPATH', '')}",
    }


def weights(run_dir, rank: int) -> dict:
    path = run_dir / "checkpoints" / f"rank_{rank}" / "final.ckpt"
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


def history(launch, run, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


def test_a_warned_parallel_job_stops_every_rank_at_one_step_and_its_requeue_finishes(tmp_path):
    straight, warned = tmp_path / "straight", tmp_path / "warned"
    straight.mkdir(), warned.mkdir()
    never = warn_launcher_at(10**9, os.getpid(), tmp_path / "never")
    proc = run_train_here([*JOB, never], straight, env=workers_env(0))
    assert proc.returncode == 0, proc.stderr[-3000:]

    job = [*JOB, warn_launcher_at(6, os.getpid(), requeue_file(warned / "run"))]
    with armed() as arm:
        arm(0)
        with pytest.raises(signals.Requeued):
            run_train_here(job, warned, env=workers_env(0))
        (stopped,) = runs_of(warned)
        assert stopped.info.status == "RUNNING" and stopped.data.tags["sporeflow.requeues"] == "1"
        for rank in (0, 1):  # every rank at step 6 (epoch 2's second), none beyond
            ckpts = warned / "run" / "checkpoints" / f"rank_{rank}"
            assert (ckpts / "epoch_0001_step_00000006.ckpt").is_file(), sorted(ckpts.iterdir())
            assert not (ckpts / "final.ckpt").exists() and not (ckpts / "epoch_0002.ckpt").exists()
        signals.requeue_off(signal.SIGUSR2)  # its last requeue allowed: nothing armed
        proc = run_train_here(job, warned, env=workers_env(1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SLURM requeued this job (1 time(s)): it continues" in proc.stderr
    (run,) = runs_of(warned)
    assert run.info.run_id == stopped.info.run_id and run.info.status == "FINISHED"
    (reference,) = runs_of(straight)
    for key in ("train/loss", "val/acc"):
        got, want = history(warned, run, key), history(straight, reference, key)
        assert [s for s, _ in got] == [s for s, _ in want], f"{key}: each step once"
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-5)
    want = weights(straight / "run", 0)
    for rank in (0, 1):
        got = weights(warned / "run", rank)
        assert got.keys() == want.keys()
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-7, err_msg=name)
