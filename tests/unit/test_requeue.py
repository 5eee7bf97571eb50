"""A job warned before its SLURM time limit (issue 36 item 3), in this process: it stops at the
next step with a full checkpoint of that step and its run left RUNNING; the requeued job (SLURM
says so in SLURM_RESTART_COUNT) continues the same run dir and MLflow run, and ends with the
weights and the metric history of a job that was never stopped. The real scheduler's side
(SIGUSR2 from SLURM, `scontrol requeue`, the sweep waiting) is tests/e2e/test_slurm_cluster.py."""

from __future__ import annotations

import signal

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from helpers import requeue
from helpers.inprocess import TINY, TINY_PIPELINE, run_train_here
from helpers.requeue import signal_at, slurm_env
from helpers.store import by_stage, runs_of
from sporeflow.core import signals
from sporeflow.core.errors import CheckpointError
from sporeflow.launch import slurm
from sporeflow.launch.slurm import requeue_refusal
from sporeflow.storage.run_marker import (
    PIPELINE,
    find_resume_dir,
    is_pipeline_dir,
    node0_run_dir,
    write_run_marker,
)

JOB = [*TINY, "epochs=3", "seed=5"]  # 128 images in batches of 32: 4 steps an epoch


@pytest.fixture
def armed():
    """SIGUSR2 asks for a requeue, as sporeflow's SLURM launcher arms it in a job."""
    with requeue.armed() as arm:
        yield arm


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The same job never stopped (its warning never comes): (its run, final weights)."""
    launch = tmp_path_factory.mktemp("straight")
    proc = run_train_here([*JOB, signal_at(10**9)], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run,) = runs_of(launch)
    return run, weights(launch / "run" / "checkpoints" / "final.ckpt"), launch


def weights(path) -> dict:
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


def history(launch, run, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    return sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))


@pytest.mark.parametrize(
    ("warned_at", "kept"),
    [(6, "epoch_0001_step_00000006.ckpt"), (4, "epoch_0001.ckpt")],
    ids=["mid-epoch", "at-an-epoch-end"],
)
def test_a_warned_job_stops_at_the_next_step_and_its_requeue_finishes_the_same_run(
    straight, armed, tmp_path, warned_at, kept
):
    job = [*JOB, signal_at(warned_at)]
    armed(0)
    with pytest.raises(signals.Requeued):
        run_train_here(job, tmp_path, env=slurm_env(0))
    (stopped,) = runs_of(tmp_path)
    assert stopped.info.status == "RUNNING" and stopped.data.tags["sporeflow.requeues"] == "1"
    checkpoints = tmp_path / "run" / "checkpoints"
    assert (checkpoints / kept).is_file() and not (checkpoints / "final.ckpt").exists()
    steps = [s for s, _ in history(tmp_path, stopped, "train/loss")]
    assert steps == list(range(1, warned_at + 1)), "every step's loss written before the stop"

    signals.requeue_off(signal.SIGUSR2)  # its last requeue allowed: the launcher arms nothing
    proc = run_train_here(job, tmp_path, env=slurm_env(1))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "SLURM requeued this job (1 time(s)): it continues" in proc.stderr
    (run,) = runs_of(tmp_path)
    assert run.info.run_id == stopped.info.run_id and run.info.status == "FINISHED"
    reference, want, ref_launch = straight
    for key in ("train/loss", "val/acc", "val/loss"):
        got, expected = history(tmp_path, run, key), history(ref_launch, reference, key)
        assert [s for s, _ in got] == [s for s, _ in expected], f"{key}: each step once"
        np.testing.assert_allclose([v for _, v in got], [v for _, v in expected], rtol=1e-5)
    got = weights(checkpoints / "final.ckpt")
    assert got.keys() == want.keys()
    for name, value in want.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-7, err_msg=name)


LAUNCHER = {"max_num_timeout": 2, "signal_delay_s": 30, "timeout_min": 1}


@pytest.mark.parametrize(
    ("launcher", "says"),
    [
        ({**LAUNCHER, "max_num_timeout": 0, "signal_delay_s": 90}, None),
        (LAUNCHER, None),
        ({**LAUNCHER, "signal_delay_s": 90}, "hydra.launcher.signal_delay_s=90:"),
        ({**LAUNCHER, "signal_delay_s": 60}, "(hydra.launcher.timeout_min=1, 60 s)"),
    ],
)
def test_settings_a_requeue_cannot_work_with_are_named(launcher, says):
    refusal = requeue_refusal(launcher)
    assert refusal == says if says is None else says in refusal


def test_a_nodes_own_run_dir_of_a_pipeline_is_continued_by_node_0s_marker(tmp_path):
    """On several nodes rank 0 (node 0) marks the pipeline's run dir alone; node 1 continues
    `<job>_node1` (its own ranks' files) because `<job>` is a pipeline's - not another job's."""
    node0, node1, stranger = tmp_path / "3", tmp_path / "3_node1", tmp_path / "4_node1"
    for folder in (node0, node1, stranger):
        folder.mkdir()
    write_run_marker(node0, mlflow_run_id="abc", stage=PIPELINE)
    assert node0_run_dir(node1, 1) == node0 and node0_run_dir(node1, 2) == node1
    assert find_resume_dir(str(node1), tmp_path, node_rank=1) == node1.resolve()
    assert is_pipeline_dir(node1, node_rank=1) and not is_pipeline_dir(node1)
    for folder, rank in ((node1, 0), (stranger, 1)):
        with pytest.raises(CheckpointError, match="not a run dir"):
            find_resume_dir(str(folder), tmp_path, node_rank=rank)


def test_a_sweep_whose_jobs_could_not_continue_is_refused_before_any_is_submitted(tmp_path):
    """Refused by the SLURM launcher before sbatch is called, in one line, and no sweep run
    is made (the sweep callback asks the same question before its parent run)."""
    limits = [f"hydra.launcher.{key}" for key in ("max_num_timeout=1", "timeout_min=1")]
    late = "hydra.launcher.signal_delay_s=90"
    proc = run_train_here(["-m", "cluster=slurm", *TINY, *limits, late], tmp_path, run_dir=None)
    assert proc.returncode == 2, proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"Config error: {late}: SLURM's warning must come before"), line
    assert not runs_of(tmp_path)


PIPELINE_JOB = [*TINY_PIPELINE, "boost.epochs=2", "boost.baselines=[baseline,snapshot_mean]"]
STAGES = ("stage1", "stage2", "baseline", "snapshot_mean")


def stage_runs(launch) -> dict:
    """The pipeline's runs by their stage tag (each must be one run)."""
    found = by_stage(runs_of(launch))
    assert all(len(runs) == 1 for runs in found.values()), {k: len(v) for k, v in found.items()}
    return {stage: runs[0] for stage, runs in found.items()}


@pytest.fixture(scope="module")
def straight_pipeline(tmp_path_factory):
    """The dim-reduce job never stopped: its launch dir."""
    launch = tmp_path_factory.mktemp("straight_pipeline")
    proc = run_train_here([*PIPELINE_JOB, signal_at(10**9)], launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return launch


def test_a_requeued_pipeline_continues_each_stage_where_it_stopped_and_ends_as_one_run(
    straight_pipeline, armed, tmp_path
):
    """Warned at step 6 of every stage that trains (stage 1 mid-epoch among its snapshots,
    stage 2's dimension-reduced steps, the baseline): three requeues, and each continued job
    takes the stages it finished as they were and continues the one it stopped in. The end is
    the never-stopped job's: one FINISHED run per stage, each step's loss and each epoch's
    evaluation once with the same values, the same snapshots, the same final weights of
    every stage, the same comparison on the pipeline's run (with the PCA's seconds)."""
    job = [*PIPELINE_JOB, signal_at(6)]
    for requeues, stopped_in in enumerate(("stage1", "stage2", "baseline")):
        armed(requeues)
        with pytest.raises(signals.Requeued):
            run_train_here(job, tmp_path, env=slurm_env(requeues))
        runs = stage_runs(tmp_path)
        assert runs[stopped_in].info.status == "RUNNING", stopped_in
        assert runs["pipeline"].data.tags["sporeflow.requeues"] == str(requeues + 1)
    signals.requeue_off(signal.SIGUSR2)
    proc = run_train_here(job, tmp_path, env=slurm_env(3))
    assert proc.returncode == 0, proc.stderr[-3000:]

    got, want = stage_runs(tmp_path), stage_runs(straight_pipeline)
    assert sorted(got) == sorted(want) == sorted(["pipeline", *STAGES])
    assert {run.info.status for run in got.values()} == {"FINISHED"}
    for stage in ("stage1", "stage2", "baseline"):
        for key in ("train/loss", "val/acc"):
            mine, theirs = (
                history(tmp_path, got[stage], key),
                history(straight_pipeline, want[stage], key),
            )
            assert [s for s, _ in mine] == [s for s, _ in theirs], f"{stage} {key}: each once"
            np.testing.assert_allclose([v for _, v in mine], [v for _, v in theirs], rtol=1e-5)
    for key in ("val/stage2/acc", "val/stage1/acc", "val/gain", "test/gain"):
        assert got["pipeline"].data.metrics[key] == pytest.approx(
            want["pipeline"].data.metrics[key]
        )
    # the PCA ran in the job that was then stopped in stage 2; the last one still reports it
    assert got["pipeline"].data.metrics["pca_seconds"] > 0
    snaps = sorted(p.name for p in (tmp_path / "run" / "stage1" / "snapshots").glob("*.npy"))
    assert snaps == sorted(
        p.name for p in (straight_pipeline / "run" / "stage1" / "snapshots").glob("*.npy")
    )
    for name in snaps:
        np.testing.assert_allclose(
            np.load(tmp_path / "run" / "stage1" / "snapshots" / name),
            np.load(straight_pipeline / "run" / "stage1" / "snapshots" / name),
            rtol=1e-5,
            atol=1e-7,
        )
    for stage in STAGES:
        mine = weights(tmp_path / "run" / stage / "checkpoints" / "final.ckpt")
        theirs = weights(straight_pipeline / "run" / stage / "checkpoints" / "final.ckpt")
        assert mine.keys() == theirs.keys(), stage
        for name, value in theirs.items():
            np.testing.assert_allclose(
                mine[name], value, rtol=1e-5, atol=1e-7, err_msg=f"{stage} {name}"
            )


@pytest.mark.parametrize("name", ["x y", "no#1", "what?", "é ü", "it's"])
def test_a_sweep_folder_reaches_sbatch_as_one_quoted_value(tmp_path, name):
    """submitit's own sbatch script: each #SBATCH path a shell-quoted word that reads back as
    the folder (sbatch reads a quoted #SBATCH value as one word; not run on a cluster here)."""
    import shlex

    from submitit.slurm.slurm import _make_sbatch_string

    folder = tmp_path / name / ".submitit" / "%j"
    script = _make_sbatch_string(command="python -c pass", folder=folder)
    outputs = [ln for ln in script.splitlines() if ln.startswith("#SBATCH --output=")]
    (value,) = shlex.split(outputs[0].removeprefix("#SBATCH --output="))
    assert value.startswith(str(folder.parent) + "/")
    assert slurm.folder_refusal(str(tmp_path / name)) is None


@pytest.mark.parametrize("name", ["100%", "a%jb", "%%"])
def test_a_sweep_folder_with_a_percent_sign_is_refused_before_submitting(tmp_path, name):
    refusal = slurm.folder_refusal(str(tmp_path / name))
    assert refusal is not None and refusal.startswith(f"hydra.sweep.dir={tmp_path / name}: ")
