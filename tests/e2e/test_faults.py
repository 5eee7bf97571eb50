"""Nothing lost, nothing silent: real processes, real signals, a real sqlite MLflow store."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.machine import unavailable
from helpers.store import runs_of
from helpers.train import start_and_wait_for_a_checkpoint, train_command

pytestmark = pytest.mark.e2e


def test_runs_started_together_get_their_own_dir_checkpoints_and_run(tmp_path):
    """Started in the same second in one launch dir, on a store none of them has created yet
    (three at once: more than a pair, on a machine of two cores)."""
    n = 3
    procs = []
    for _ in range(n):
        cmd, env = train_command(["debug=quick"], tmp_path, run_dir=None)
        procs.append(
            subprocess.Popen(
                cmd,
                cwd=tmp_path,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    outputs = [p.communicate(timeout=600) for p in procs]
    for proc, (_, err) in zip(procs, outputs, strict=False):
        assert proc.returncode == 0, err[-3000:]
        assert "tracking disabled" not in err
    run_dirs = sorted(p.parent for p in tmp_path.glob("outputs/*/*/.sporeflow_claim.json"))
    assert len(run_dirs) == n
    for run_dir in run_dirs:
        assert (run_dir / "checkpoints" / "final.ckpt").stat().st_size > 1000
        assert (run_dir / "checkpoints" / "epoch_0001.ckpt").is_file()
    runs = runs_of(tmp_path)
    assert len(runs) == n and all(r.info.status == "FINISHED" for r in runs)
    assert sorted(Path(r.data.tags["run_dir"]) for r in runs) == run_dirs


def test_a_run_dir_held_by_a_live_run_is_refused(tmp_path):
    cmd, env = train_command(["epochs=30"], tmp_path)
    first = subprocess.Popen(
        cmd, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        claim = tmp_path / "run" / ".sporeflow_claim.json"
        for _ in range(600):
            if claim.exists() or first.poll() is not None:
                break
            subprocess.run(["sleep", "0.1"])
        second = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert second.returncode == 1
        assert (
            f"run dir {tmp_path / 'run'} is in use by another run (pid {first.pid})"
            in second.stderr
        )
        assert "Traceback" not in second.stderr
    finally:
        first.kill()
        first.wait()


def test_divergence_fails_the_run_and_keeps_the_last_finite_checkpoint(tmp_path):
    """lr=1e6 on the default job: the loss turns non-finite within the first epochs."""
    cmd, env = train_command(["optimizer.lr=1e6", "epochs=5"], tmp_path)
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    err = proc.stderr
    assert "Error: stage train diverged at epoch" in err
    assert "loss=" in err or "non-finite weights" in err
    assert "Traceback" not in err and "Error executing job" not in err
    ckpts = tmp_path / "run" / "checkpoints"
    assert not (ckpts / "final.ckpt").exists()
    import mindspore as ms
    import numpy as np

    for path in ckpts.glob("*.ckpt"):  # whatever was saved is finite
        assert all(
            np.isfinite(v.asnumpy()).all() for v in ms.load_checkpoint(str(path)).values()
        ), path
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FAILED"
    assert "diverged at epoch" in run.data.tags["sporeflow.failure"]


def test_divergence_check_can_be_switched_off(tmp_path):
    cmd, env = train_command(
        ["optimizer.lr=1e6", "epochs=2", "callbacks.stop_on_divergence=false"], tmp_path
    )
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "checkpoints" / "final.ckpt").exists()
    # it did diverge: the guard that is off would have stopped this run
    import math

    (run,) = runs_of(tmp_path)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    losses = [m.value for m in client.get_metric_history(run.info.run_id, "train/loss")]
    assert losses and not all(math.isfinite(v) for v in losses), losses[-5:]


def job_processes(marker: str) -> list:
    """Live processes of a job: every one of them (launcher, msrun, scheduler, workers, log
    tailers) names the test's own tmp dir on its command line."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and marker in " ".join(
                p.info["cmdline"] or []
            ):
                found.append(p)
        except psutil.Error:
            continue
    return found


def wait_gone(marker: str, seconds: float) -> list:
    import time

    deadline = time.time() + seconds
    while job_processes(marker) and time.time() < deadline:
        time.sleep(0.5)
    return job_processes(marker)


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_a_signal_ends_the_run_killed_with_one_line_and_a_resume_hint(tmp_path, sig):
    import signal as signals

    proc = start_and_wait_for_a_checkpoint(["epochs=300"], tmp_path, "checkpoints/epoch_0001.ckpt")
    proc.send_signal(getattr(signals, sig))
    _, err = proc.communicate(timeout=60)
    # MindSpore's own SIGINT handler turns a Ctrl-C that lands mid-step into SIGTERM: 130 or 143
    assert proc.returncode in ((130, 143) if sig == "SIGINT" else (143,)), err[-2000:]
    (line,) = [ln for ln in err.splitlines() if ln.startswith("Interrupted by")]
    assert "the run is marked KILLED" in line and f"resume={tmp_path / 'run'}" in line
    ckpt = line.split("last checkpoint ")[1].split(";")[0]
    assert Path(ckpt).is_file()
    assert "Traceback" not in err
    (run,) = runs_of(tmp_path)
    assert run.info.status == "KILLED"


def wait_for_mapped(pid: int, library: str, seconds: float = 60) -> None:
    """Wait until the process has loaded `library` (a name in /proc/PID/maps): a moment in its
    start-up that does not depend on how fast the machine is."""
    import time

    deadline = time.monotonic() + seconds
    while library not in Path(f"/proc/{pid}/maps").read_text():
        assert time.monotonic() < deadline, f"{library} not loaded after {seconds} s"
        time.sleep(0.01)


@pytest.mark.parametrize("moment", ["train.py loads", "MindSpore loads"])
def test_ctrl_c_before_any_run_started_is_one_line_and_leaves_nothing(tmp_path, moment):
    """Ctrl-C while train.py loads (0.3 s in) or while MindSpore loads (its C extension just
    mapped): exit 130, one line, no run dir, no MLflow run (it crashed in MindSpore's shutdown
    with exit 134 before; Hydra's empty outputs/ may stay, as after any refused command). A fixed
    3 s sleep for the second moment hit the first graph compile on a fast machine."""
    import signal as signals
    import time

    cmd, env = train_command([], tmp_path, run_dir=None)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    if moment == "MindSpore loads":
        wait_for_mapped(proc.pid, "mindspore/_c_expression")
    else:
        time.sleep(0.3)
    proc.send_signal(signals.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-2000:]
    assert err.strip().splitlines() == [
        "Interrupted by SIGINT before any run started; nothing was left behind"
    ]
    assert list(tmp_path.glob("outputs/*")) == [] and runs_of(tmp_path) == []


def test_sigterm_to_the_launcher_stops_every_process_of_a_parallel_job(tmp_path):
    proc = start_and_wait_for_a_checkpoint(
        ["parallel=data2", "epochs=300"], tmp_path, "checkpoints/rank_0/epoch_0001.ckpt"
    )
    assert len(job_processes(str(tmp_path))) >= 4  # launcher, msrun, scheduler, 2 workers
    proc.terminate()
    _, err = proc.communicate(timeout=90)
    assert proc.returncode == 143, err[-2000:]
    assert "Interrupted by SIGTERM: the run is marked KILLED" in err
    assert wait_gone(str(tmp_path), 30) == []
    (run,) = runs_of(tmp_path)
    assert run.info.status == "KILLED"


@pytest.mark.slow
def test_sigkill_of_the_launcher_takes_the_workers_with_it(tmp_path):
    proc = start_and_wait_for_a_checkpoint(
        ["parallel=data2", "epochs=300"], tmp_path, "checkpoints/rank_0/epoch_0001.ckpt"
    )
    proc.kill()
    proc.communicate(timeout=30)
    assert wait_gone(str(tmp_path), 60) == [], "processes of the job outlived their launcher"
    # rank 0 gets SIGTERM from its dying parent and usually closes its run itself; when it was
    # blocked in a collective and the watchdog had to SIGKILL it, the next start closes the run
    cmd, env = train_command(["epochs=1"], tmp_path, run_dir="next")
    assert (
        subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, timeout=300).returncode == 0
    )
    assert sorted(r.info.status for r in runs_of(tmp_path)) == ["FINISHED", "KILLED"]


def test_sigterm_ends_a_pipeline_and_its_stage_runs_killed(tmp_path):
    proc = start_and_wait_for_a_checkpoint(
        ["boost=dim_reduce", "epochs=300", "boost.snapshot.start_epoch=290"],
        tmp_path,
        "stage1/checkpoints/epoch_0001.ckpt",
    )
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "continue with: python train.py" in err and f"resume={tmp_path / 'run'}" in err
    statuses = {r.data.tags["stage"]: r.info.status for r in runs_of(tmp_path)}
    assert statuses == {"pipeline": "KILLED", "stage1": "KILLED"}


def test_a_resume_that_cannot_start_leaves_the_original_run_as_it_was(tmp_path):
    """A truncated newest checkpoint is skipped (the older one resumes); a folder whose every
    checkpoint is unreadable, or one of another network, is refused before MLflow is touched."""
    cmd, env = train_command(["epochs=2"], tmp_path, run_dir="first")
    assert subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True).returncode == 0
    (original,) = runs_of(tmp_path)
    assert original.info.status == "FINISHED"
    ckpts = tmp_path / "first" / "checkpoints"
    for ckpt in ckpts.glob("epoch_*.ckpt"):
        ckpt.write_bytes(ckpt.read_bytes()[:1000])  # truncated: none loads

    cases = [
        (["epochs=3", f"resume={tmp_path / 'first'}"], "no readable epoch_* checkpoint"),
        (
            ["epochs=3", "model=mlp", "dataset.image_size=28", f"resume={tmp_path / 'other'}"],
            "is not a checkpoint of",
        ),
    ]
    cmd, env = train_command(["epochs=1"], tmp_path, run_dir="other")
    assert subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True).returncode == 0
    for args, expected in cases:
        cmd, env = train_command(args, tmp_path, run_dir="resumed")
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert (
            expected in proc.stderr and "resume=" in proc.stderr and "Traceback" not in proc.stderr
        )
    after = {r.info.run_id: r for r in runs_of(tmp_path)}
    assert len(after) == 2  # no run was created by the refused resumes
    assert after[original.info.run_id].info.status == "FINISHED"
    assert after[original.info.run_id].info.end_time == original.info.end_time


def test_a_full_disk_fails_the_run_with_one_line_and_keeps_earlier_checkpoints(tmp_path):
    import mindspore as ms

    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=800k", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        unavailable(
            f"cannot mount a small tmpfs here ({mounted.stderr.decode().strip()}): needs root"
        )
    try:
        cmd, env = train_command(
            ["epochs=4", "callbacks.best.keep=0"], tmp_path, run_dir="small/run"
        )
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 1, proc.stderr[-3000:]
        (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("Error:")]
        assert (
            "no space left writing" in line
            and "MB free on its device" in line
            and "MB needed" in line
        )
        assert "Traceback" not in proc.stderr
        ckpts = small / "run" / "checkpoints"
        left = sorted(p.name for p in ckpts.iterdir())
        assert left and all(
            name.startswith("epoch_") and name.endswith(".ckpt") for name in left
        ), left
        for name in left:  # earlier checkpoints intact, no temp files
            assert ms.load_checkpoint(str(ckpts / name))
        (run,) = runs_of(tmp_path)
        assert run.info.status == "FAILED" and "no space left" in run.data.tags["sporeflow.failure"]
    finally:
        subprocess.run(["umount", "-l", str(small)])


@pytest.mark.slow
def test_a_killed_worker_is_named_with_its_rank_and_signal(tmp_path):
    import os
    import signal as signals

    proc = start_and_wait_for_a_checkpoint(
        ["parallel=data2", "epochs=300"], tmp_path, "checkpoints/rank_1/epoch_0001.ckpt"
    )
    pid = int((tmp_path / "run" / "msrun_logs" / "worker_1.pid").read_text())
    os.kill(pid, signals.SIGKILL)
    _, err = proc.communicate(timeout=180)  # 300 epochs take far longer: the kill ended the job
    assert proc.returncode == 1, err[-3000:]
    assert f"rank 1 (pid {pid}) was killed by SIGKILL" in err
    assert wait_gone(str(tmp_path), 30) == []
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FAILED"


# Loaded by every Python process of the job (sitecustomize on PYTHONPATH); registered before
# MindSpore's handlers, so it runs after them: rank 1 dies by SIGSEGV once its work is done and
# it has left MindSpore's cluster - as MindSpore 2.10 itself now and then does.
CRASH_AT_EXIT = """
import atexit, os, signal
if os.environ.get("MS_ROLE") == "MS_WORKER" and os.environ.get("RANK_ID") == "1":
    atexit.register(lambda: os.kill(os.getpid(), signal.SIGSEGV))
"""


def test_a_worker_crashing_after_its_work_is_done_leaves_the_job_finished(tmp_path):
    """Each worker marks its work done before it exits; a signal after that (MindSpore's
    teardown) is said in one warning, and the job stays what it was: FINISHED, exit 0."""
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(CRASH_AT_EXIT)
    cmd, env = train_command(
        ["parallel=data2", "epochs=1"], tmp_path, env={"PYTHONPATH": str(hook)}
    )
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log_dir = tmp_path / "run" / "msrun_logs"
    pid = int((log_dir / "worker_1.pid").read_text())
    assert (
        f"rank 1 (pid {pid}) was killed by SIGSEGV after this node's workers had all finished"
        in proc.stderr
    )
    assert sorted(p.name for p in log_dir.glob("worker_*.done")) == [
        "worker_0.done",
        "worker_1.done",
    ]
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED" and "final/val/acc" in run.data.metrics
