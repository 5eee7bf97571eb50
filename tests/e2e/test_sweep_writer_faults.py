"""Issue 75 item 2: a sweep decides only on every job's records. The sweep's shared tracking
writer (`sporeflow.tracking.sweep_writer`, a real process) SIGKILLed before it applied the
parent run, and during job 1: the sweep still decides on both jobs (the decision of an
undisturbed sweep of the same seed), `sporeflow sync` then sends nothing (nothing was left,
nothing twice), and every job's record equals the undisturbed one's point for point."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from helpers.store import client_of, record, runs_of
from helpers.train import multirun, sporeflow_cli, start_multirun
from sporeflow.tracking.journal import AppliedState

pytestmark = pytest.mark.e2e

SWEEP = ["debug=quick", "optimizer.lr=0.01,0.03"]


def decision_line(err: str) -> str:
    (line,) = [ln for ln in err.splitlines() if ln.startswith(("winner: ", "tie: "))]
    return line


def jobs_by_lr(launch: Path) -> dict:
    client = client_of(launch)
    return {
        r.data.params["optimizer.lr"]: record(client, r)["metrics"]
        for r in runs_of(launch)
        if r.data.tags.get("stage") == "train"
    }


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory):
    launch = tmp_path_factory.mktemp("undisturbed")
    proc = multirun(launch, *SWEEP)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return launch, decision_line(proc.stderr)


def writer_pid(sweep_dir: Path) -> int:
    """The sweep's writer, once the sweep has journalled its parent run (it follows that)."""
    who = sweep_dir / "tracking" / f"writer-{socket.gethostname()}.json"
    deadline = time.time() + 120
    while not (who.exists() and parent_journal(sweep_dir)):
        assert time.time() < deadline, "the sweep's writer never said who it is"
        time.sleep(0.02)
    return int(json.loads(who.read_text())["pid"])


def parent_journal(sweep_dir: Path) -> Path | None:
    return next(iter(sorted((sweep_dir / "tracking").glob("*.jsonl"))), None)


def kill_the_writer(proc, sweep_dir: Path, when: str) -> str:
    """SIGKILL the sweep's writer `when`; the sweep's stderr once it ended."""
    try:
        pid = writer_pid(sweep_dir)
        if when == "during_job_1":
            while not (sweep_dir / "1").exists():
                assert proc.poll() is None, proc.communicate()[1][-3000:]  # job 0 did not end it
                time.sleep(0.05)
            time.sleep(1.0)
        os.kill(pid, signal.SIGKILL)
        if when == "before_the_parent":
            applied = AppliedState.load(parent_journal(sweep_dir)).seq
            assert applied == 0, "the parent was applied before the kill: the test proved nothing"
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-3000:]
        return err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("when", ["before_the_parent", "during_job_1"])
def test_a_sweep_whose_writer_is_killed_decides_on_every_jobs_records(undisturbed, tmp_path, when):
    reference, decided = undisturbed
    sweep_dir = tmp_path / "multirun"
    err = kill_the_writer(start_multirun(tmp_path, *SWEEP), sweep_dir, when)
    assert decision_line(err) == decided, err[-3000:]
    assert "[sporeflow] sweep FINISHED: 2 jobs finished, 0 failed" in err
    assert "tracking records of the sweep are kept" not in err
    synced = sporeflow_cli(tmp_path, "sync", str(sweep_dir))
    assert synced.returncode == 0, synced.stderr
    lines = synced.stdout.splitlines()
    assert lines and all("sent 0 records, 0 left" in ln for ln in lines), synced.stdout
    assert jobs_by_lr(tmp_path) == jobs_by_lr(reference), "a record lost or sent twice"
    compared = sporeflow_cli(tmp_path, "compare", "--sweep", str(sweep_dir))
    assert compared.returncode == 0, compared.stderr
    assert decided in compared.stdout.splitlines(), compared.stdout
    parents = [r for r in runs_of(tmp_path) if r.data.tags.get("stage") == "sweep"]
    assert [p.info.status for p in parents] == ["FINISHED"]
    assert parents[0].data.tags["sporeflow.decision"] == decided.split(":")[0]
