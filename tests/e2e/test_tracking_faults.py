"""No record lost: the tracking journal and its writer against a real `mlflow server` on
127.0.0.1 that is paused, down, or restarted; a sqlite store another process holds locked;
and the trainer or the writer SIGKILLed mid-run. Every record is compared with an
uninterrupted run of the same seed: same metric keys, same (step, value) points, no
duplicates, same params, status FINISHED (or KILLED where the trainer was killed)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from helpers.store import client_of, record, runs_of
from helpers.train import run_train, sporeflow_cli, start_and_wait_for_a_checkpoint
from sporeflow.entry.cli import server_env

pytestmark = pytest.mark.e2e

EPOCHS = ["epochs=3"]
FIRST_CKPT = "checkpoints/epoch_0001.ckpt"  # epoch 2 is running once it exists


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A real `mlflow server` (its own process group: uvicorn workers included) on a port."""

    def __init__(self, root: Path, port: int | None = None):
        self.root, self.port = root, port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> Server:
        self.root.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "mlflow"),
                "server",
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--backend-store-uri",
                f"sqlite:///{self.root}/mlflow.db",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--workers",
                "1",
            ],
            env=server_env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        pytest.fail("mlflow server did not start within 120 s")

    def signal(self, sig: int) -> None:
        os.killpg(self.proc.pid, sig)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            self.proc.wait(timeout=60)


def only_run(client: MlflowClient):
    experiment = client.get_experiment_by_name("sporeflow")
    (run,) = client.search_runs([experiment.experiment_id])
    return run


def without_paths(params: dict) -> dict:
    """Where a run is tracked (store, experiment, drain time) differs between two runs by design."""
    return {k: v for k, v in params.items() if not k.startswith("tracking.")}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = Server(tmp_path_factory.mktemp("server")).start()
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference(server, tmp_path_factory):
    """An uninterrupted 3-epoch run over HTTP: the record every fault case must equal."""
    launch = tmp_path_factory.mktemp("reference")
    proc = run_train(
        [*EPOCHS, f"tracking.uri={server.uri}", "tracking.experiment_name=ref"], launch
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(server.uri)
    (run,) = client.search_runs([client.get_experiment_by_name("ref").experiment_id])
    return run, record(client, run)


def assert_same_record(got: dict, reference: dict) -> None:
    assert without_paths(got["params"]) == without_paths(reference["params"])
    assert set(got["metrics"]) == set(reference["metrics"])
    for key, points in reference["metrics"].items():
        assert got["metrics"][key] == points, key  # same steps, same values, no duplicates


def test_run_tracked_over_http(server, reference):
    run, ref = reference
    assert run.info.status == "FINISHED" and run.data.params["epochs"] == "3"
    assert len(ref["metrics"]["train/loss"]) == 3 * int(run.data.tags["batch.steps_per_epoch"])
    client = MlflowClient(server.uri)
    assert {a.path for a in client.list_artifacts(run.info.run_id, "checkpoints")} == {
        "checkpoints/final.ckpt"
    }


@pytest.mark.slow
def test_a_server_paused_for_30s_in_epoch_2_loses_and_duplicates_nothing(
    server, reference, tmp_path
):
    """SIGSTOP: requests hang, time out, and may still land when the server wakes: the writer
    replays them with checks, so the record equals the uninterrupted one."""
    args = [*EPOCHS, f"tracking.uri={server.uri}", "tracking.drain_timeout=180"]
    proc = start_and_wait_for_a_checkpoint(args, tmp_path, FIRST_CKPT)
    server.signal(signal.SIGSTOP)
    try:
        time.sleep(30)
    finally:
        server.signal(signal.SIGCONT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "tracking records of run" not in err  # everything arrived within the drain time
    client = MlflowClient(server.uri)
    experiment = client.get_experiment_by_name("sporeflow")
    (run,) = client.search_runs([experiment.experiment_id])
    assert run.info.status == "FINISHED"
    assert_same_record(record(client, run), reference[1])
    log = next((tmp_path / "run" / "tracking").glob("*.writer.log")).read_text()
    assert "failed" in log, "the pause never reached the writer: the test proved nothing"


def test_a_server_down_for_the_whole_run_is_caught_up_by_sporeflow_sync(reference, tmp_path):
    later = Server(tmp_path / "server")  # its port is known; nothing listens on it yet
    args = [*EPOCHS, f"tracking.uri={later.uri}", "tracking.drain_timeout=2"]
    proc = run_train(args, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run_dir = tmp_path / "run"
    lines = proc.stderr.splitlines()
    kept = [ln for ln in lines if "tracking records of run" in ln]
    assert len(kept) == 1 and f"send them with: sporeflow sync {run_dir}" in kept[0], kept
    early = [i for i, ln in enumerate(lines) if ln.startswith("[sporeflow] tracking: connect to")]
    assert len(early) == 1 and early[0] < lines.index(kept[0]), "said once, while it trained"
    # issue 51 item 4: the summary says the store does not have the run, and the wait is said
    (summary,) = [ln for ln in lines if "weights " in ln]
    assert f"MLflow {later.uri} does not have run sf-" in summary, summary
    assert "its records wait in" in summary and str(run_dir / "tracking") in summary, summary
    waited = [ln for ln in lines if "is not taking records: waiting up to 2 s" in ln]
    assert len(waited) == 1 and lines.index(waited[0]) < lines.index(kept[0]), lines[-6:]
    later.start()
    try:
        first = sporeflow_cli(tmp_path, "sync", str(run_dir))
        assert first.returncode == 0, first.stderr
        sent = int(first.stdout.split("sent ")[1].split()[0])
        assert sent == int(kept[0].split("] ")[1].split()[0]) and ", 0 left" in first.stdout
        again = sporeflow_cli(tmp_path, "sync", str(run_dir))
        assert again.returncode == 0 and "sent 0 records, 0 left" in again.stdout
        client = MlflowClient(later.uri)
        run = only_run(client)
        assert run.info.status == "FINISHED"
        assert_same_record(record(client, run), reference[1])
    finally:
        later.stop()


def wait_for_the_store(db: Path) -> None:
    """The writer builds a new store beside and links it in whole; lock the store, not nothing."""
    deadline = time.time() + 120
    while not db.exists():
        assert time.time() < deadline, f"no store at {db} within 120 s"
        time.sleep(0.1)


def hold_write_lock(db: Path, seconds: float) -> subprocess.Popen:
    """Another process takes the sqlite database's write lock and keeps it `seconds`."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys, time; c = sqlite3.connect(sys.argv[1], isolation_level=None); "
            "c.execute('BEGIN EXCLUSIVE'); print('locked', flush=True); time.sleep(float(sys.argv[2])); "
            "c.execute('COMMIT')",
            str(db),
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "locked"
    return holder


@pytest.mark.slow
def test_a_sqlite_store_locked_for_90s_loses_nothing(reference, tmp_path):
    args = [*EPOCHS, "tracking.drain_timeout=240"]
    proc = start_and_wait_for_a_checkpoint(args, tmp_path, FIRST_CKPT)
    wait_for_the_store(tmp_path / "mlflow.db")
    holder = hold_write_lock(tmp_path / "mlflow.db", 90)
    _, err = proc.communicate(timeout=600)
    holder.wait(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert "tracking records of run" not in err
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"
    assert_same_record(record(client_of(tmp_path), run), reference[1])
    log = next((tmp_path / "run" / "tracking").glob("*.writer.log")).read_text()
    assert "database is locked" in log, "the lock never reached the writer: the test proved nothing"


def writer_pid(run_dir: Path) -> int:
    deadline = time.time() + 60
    while not list((run_dir / "tracking").glob("*.writer.pid")):
        assert time.time() < deadline, "no writer started"
        time.sleep(0.1)
    return int(next((run_dir / "tracking").glob("*.writer.pid")).read_text())


def test_a_killed_writer_is_replaced_and_the_record_is_whole(reference, tmp_path):
    proc = start_and_wait_for_a_checkpoint(EPOCHS, tmp_path, FIRST_CKPT)
    first = writer_pid(tmp_path / "run")
    os.kill(first, signal.SIGKILL)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert writer_pid(tmp_path / "run") != first, "no new writer took over"
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"
    assert_same_record(record(client_of(tmp_path), run), reference[1])


def test_a_killed_trainer_leaves_its_records_and_its_writer_ends_the_runs_killed(tmp_path):
    """SIGKILL of a dim-reduce pipeline in stage 1: its writer applies what was journalled
    (stage 1's first epoch) and ends the parent and stage 1 KILLED, naming the process."""
    proc = start_and_wait_for_a_checkpoint(
        ["boost=dim_reduce", "epochs=300", "boost.snapshot.start_epoch=290"],
        tmp_path,
        "stage1/checkpoints/epoch_0002.ckpt",
    )
    writer = writer_pid(tmp_path / "run")
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.time() + 120
    while subprocess.run(["kill", "-0", str(writer)], capture_output=True).returncode == 0:
        assert time.time() < deadline, "the writer outlived its trainer by 2 minutes"
        time.sleep(0.2)
    runs = {r.data.tags["stage"]: r for r in runs_of(tmp_path)}
    assert set(runs) == {"pipeline", "stage1"}
    for run in runs.values():
        assert run.info.status == "KILLED"
        assert f"process {proc.pid} on" in run.data.tags["sporeflow.closed"]
    evals = client_of(tmp_path).get_metric_history(runs["stage1"].info.run_id, "val/acc")
    per_epoch = int(runs["stage1"].data.tags["batch.steps_per_epoch"])
    assert sorted(m.step for m in evals)[:2] == [per_epoch, 2 * per_epoch], (
        "epochs journalled before the kill are missing"
    )


def test_sync_refuses_a_dir_without_journals(tmp_path):
    proc = sporeflow_cli(tmp_path, "sync", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"{tmp_path}: no tracking journal under it (a run dir or sweep dir holds tracking/*.jsonl)"
    )


def test_both_killed_then_sporeflow_sync_completes_the_record_killed(tmp_path):
    """Writer and trainer SIGKILLed together (as in a power cut): the journal holds what the
    store lacks; `sporeflow sync` sends it and ends the run KILLED."""
    proc = start_and_wait_for_a_checkpoint(["epochs=300"], tmp_path, "checkpoints/epoch_0002.ckpt")
    writer = writer_pid(tmp_path / "run")
    os.kill(writer, signal.SIGKILL)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=30)
    synced = sporeflow_cli(tmp_path, "sync", str(tmp_path / "run"))
    assert synced.returncode == 0, synced.stderr
    assert ", 0 left; ended 1 runs KILLED" in synced.stdout, synced.stdout
    (run,) = runs_of(tmp_path)
    assert run.info.status == "KILLED"
    assert f"process {proc.pid} on" in run.data.tags["sporeflow.closed"]
    evals = client_of(tmp_path).get_metric_history(run.info.run_id, "val/acc")
    assert len(evals) >= 2, "the epochs journalled before the kill are missing"


def test_a_bad_line_appended_to_a_running_job_s_journal_costs_that_line_only(tmp_path):
    """Issue 75 item 3, as it was met: `not json` appended to a training job's journal in epoch
    2. Before: the writer crashed at it (three times), the job printed a JSONDecodeError
    traceback after training, exit 1, the run stayed RUNNING. Now the line is set aside and
    the run's record is whole."""
    proc = start_and_wait_for_a_checkpoint(EPOCHS, tmp_path, FIRST_CKPT)
    (journal,) = (tmp_path / "run" / "tracking").glob("*.jsonl")
    with open(journal, "a") as f:
        f.write("not json\n")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    assert "Traceback" not in err and "tracking records of run" not in err, err[-3000:]
    (run,) = runs_of(tmp_path)
    assert run.info.status == "FINISHED"
    evals = client_of(tmp_path).get_metric_history(run.info.run_id, "val/acc")
    assert len(evals) == 3, "an epoch's evaluation is missing"
    aside = journal.with_name(journal.name.replace(".jsonl", ".set-aside.txt"))
    (kept,) = aside.read_text().splitlines()
    assert kept.endswith(": not json")
    log = journal.with_name(journal.name.replace(".jsonl", ".writer.log")).read_text()
    said = [line for line in log.splitlines() if "set aside in" in line]
    assert len(said) == 1 and str(aside) in said[0] and "writer failed" not in log
