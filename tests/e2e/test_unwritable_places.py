"""Issue 77 item 4: every place a job writes, checked before work, on real mounts. Root ignores
a file's modes, so a read-only place is a tmpfs mounted read-only (and a full one a tiny tmpfs):
these tests need root to mount, and are skipped with the reason without it."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers.machine import unavailable
from helpers.train import multirun, run_train
from sporeflow.launch.msrun import override

pytestmark = pytest.mark.e2e

QUICK = ["epochs=1", "model=mlp", "model.hidden=8"]


@contextlib.contextmanager
def tmpfs(where: Path, size: str = "4m", read_only: bool = False) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (read-only at once, or later with
    `remount_read_only`), unmounted at the end."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True
    )
    if mounted.returncode != 0:
        unavailable(f"cannot mount a tmpfs here ({mounted.stderr.decode().strip()}): needs root")
    try:
        if read_only:
            remount_read_only(where)
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def remount_read_only(where: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True, capture_output=True)


def one_line(done: subprocess.CompletedProcess) -> str:
    """The refusal: exit 2, one line, no traceback."""
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    (line,) = done.stderr.rstrip("\n").split("\n")
    return line


@pytest.mark.parametrize("sweep", [False, True], ids=["run", "sweep"])
def test_a_read_only_launch_folder_is_one_line_naming_it(tmp_path, sweep):
    """Hydra makes outputs/ (multirun/) in the launch folder before sporeflow runs: a read-only
    one gave a 47-line traceback ending `OSError: [Errno 30] Read-only file system: 'outputs'`
    (a sweep: Hydra's warning about the sweep's callback first)."""
    with tmpfs(tmp_path / "launch", read_only=True) as launch:
        if sweep:
            done = multirun(launch, "model=mlp", "model.hidden=8", "epochs=1,2")
        else:
            done = run_train(QUICK, launch, run_dir=None)
        key, folder = ("hydra.sweep.dir", "multirun") if sweep else ("hydra.run.dir", "outputs")
        line = one_line(done)
        assert line.startswith(
            f"Config error: {key}: cannot write {launch / folder} (Read-only file system)"
        ), line
        assert f"give {key}=<a writable folder>" in line


@pytest.mark.parametrize("chosen", ["tracking.uri", "MLFLOW_TRACKING_URI", "default"])
def test_a_read_only_sqlite_store_is_refused_before_work(tmp_path, chosen):
    """A store on a read-only mount: the job trained, its writer failed five times ("tracking
    writer ended (exit 1): starting a new one"), exit 0, the cause only in writer.log. Now exit 2
    naming the file, whichever way the store was chosen, and no run dir."""
    from mlflow.tracking import MlflowClient

    made = tmp_path / "made.db"  # a store made here (this process keeps it open), copied
    MlflowClient(tracking_uri=f"sqlite:///{made}").search_experiments()
    with tmpfs(tmp_path / "store") as store:
        db = store / "mlflow.db"
        uri = f"sqlite:///{db}"
        shutil.copyfile(made, db)
        remount_read_only(store)
        launch = store if chosen == "default" else tmp_path
        args = [f"tracking.uri={uri}"] if chosen == "tracking.uri" else []
        env = {"MLFLOW_TRACKING_URI": uri if chosen == "MLFLOW_TRACKING_URI" else ""}
        run_dir = tmp_path / "run"
        done = run_train(
            [*QUICK, *args, override("hydra.run.dir", run_dir)], launch, env=env, run_dir=None
        )
        line = one_line(done)
        named = {"default": f"the default store {uri}", "tracking.uri": f"tracking.uri={uri}"}
        assert line.startswith(f"Config error: {named.get(chosen, f'{chosen}={uri}')}"), line
        assert f"{db} cannot be written (Read-only file system)" in line
        assert not run_dir.exists()


def test_a_run_dir_without_room_for_its_records_is_refused_and_left_empty(tmp_path):
    """The run dir on a full disk (a 28 KB tmpfs): three chained `OSError: [Errno 28]`
    tracebacks, exit 1, no run anywhere. Now exit 2 naming the folder and its free space, and
    Hydra's files removed: nothing half-made."""
    with tmpfs(tmp_path / "small", size="28k") as small:
        line = one_line(run_train(QUICK, tmp_path, run_dir="small/run"))
        assert line.startswith(f"Config error: hydra.run.dir: {small / 'run'} has "), line
        assert "KB free on its device; a run needs at least 256 KB there" in line
        assert list(small.iterdir()) == []
    assert not (tmp_path / "mlflow.db").exists()  # no store made, no run in it
