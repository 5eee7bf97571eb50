"""One tracking writer for a sweep's jobs (issue 36, item 1): a real sweep-writer process, real
trackers as jobs use them, a real sqlite store. No MindSpore: the tracker is a library here."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from mlflow.tracking import MlflowClient

from sporeflow.tracking.journal import header_of
from sporeflow.tracking.shared_writer import WRITER_ENV, SharedWriter, writer_file
from sporeflow.tracking.sync import sync
from sporeflow.tracking.tracker import Tracker


def config(**kw):
    return SimpleNamespace(**{"uri": None, "experiment_name": "t", "enabled": True, **kw})


def job(launch: Path, sweep: Path, number: int) -> Tracker:
    return Tracker.from_config(config(), launch, journal_dir=sweep / str(number))


def log_job(tracker: Tracker, steps: int, name: str):
    run = tracker.start_run(name, tags={"stage": "train"})
    for step in range(1, steps + 1):
        run.log_metrics({"m": float(step)}, step, flush=step % 10 == 0)
    run.end("FINISHED")
    return run


def history(tracker: Tracker, run) -> list[tuple[int, float]]:
    run_id = tracker.applied().runs[run.run_id]
    found = MlflowClient(tracker.uri).get_metric_history(run_id, "m")
    return sorted((m.step, m.value) for m in found)


@pytest.fixture
def shared(tmp_path, monkeypatch):
    """A sweep dir with its writer started, named to jobs as the sweep callback does."""
    sweep = tmp_path / "multirun"
    writer = SharedWriter(sweep, drain_timeout=30.0)
    assert writer.start()
    monkeypatch.setenv(WRITER_ENV, str(writer_file(sweep)))
    yield tmp_path, sweep, writer
    writer.stop()


def test_a_sweeps_jobs_share_its_writer_and_end_without_waiting_for_one(shared, monkeypatch):
    """Each job's journal names the sweep's writer, the job starts no writer of its own and
    `sporeflow sync` leaves the journal to it; the sweep's flush finds every record in the
    store once, also of a job whose run dir is outside the sweep dir; a process that is not the
    sweep's job (no variable) keeps its own writer, which the sweep's writer leaves alone; at
    the stop the writer ends and its file is gone."""
    launch, sweep, writer = shared
    jobs = [job(launch, sweep, n) for n in range(3)]
    runs = [log_job(tracker, 25, f"job{n}") for n, tracker in enumerate(jobs)]
    for tracker in jobs:
        tracker.finish()
        assert tracker._writer is None and tracker.left == 0
        assert header_of(tracker.journal)["writer"] == writer.ident
    assert [s.busy for s in sync(sweep)] == [True] * 3  # left to the live writer
    deeper = Tracker.from_config(config(), launch, journal_dir=launch / "elsewhere" / "run")
    deeper_run = log_job(deeper, 3, "deeper")
    deeper.finish()  # registered with the writer: followed wherever its run dir is
    assert deeper._writer is None and header_of(deeper.journal)["writer"] == writer.ident
    monkeypatch.delenv(WRITER_ENV)
    alone = job(launch, sweep, 3)
    alone_run = log_job(alone, 5, "alone")
    alone.finish()
    assert alone._writer is not None and header_of(alone.journal)["writer"] == "own"

    assert writer.flush() and writer.left() == 0
    for tracker, run in zip(jobs, runs, strict=True):
        assert history(tracker, run) == [(s, float(s)) for s in range(1, 26)]
        got = MlflowClient(tracker.uri).get_run(tracker.applied().runs[run.run_id])
        assert got.info.status == "FINISHED"
    assert history(alone, alone_run) == [(s, float(s)) for s in range(1, 6)]
    assert history(deeper, deeper_run) == [(s, float(s)) for s in range(1, 4)]
    assert alone.journal not in {j for j in writer._journals()}
    pid = writer._proc.pid
    assert writer.stop() == 0
    assert not psutil.pid_exists(pid) and not writer_file(sweep).exists()


def test_when_the_sweeps_writer_dies_a_job_starts_its_own_and_loses_nothing(shared):
    """SIGKILL of the shared writer mid-job: the job's tracker notices within a second, starts
    its own writer on the same journal, and the store gets every point exactly once."""
    launch, sweep, writer = shared
    tracker = job(launch, sweep, 0)
    run = tracker.start_run("r")
    run.log_metrics({"m": 1.0}, 1, flush=True)
    assert tracker.wait_applied(60) and tracker._writer is None
    os.kill(writer._proc.pid, signal.SIGKILL)
    writer._proc.wait(timeout=10)
    time.sleep(1.1)  # the tracker looks at the shared writer at most once a second
    for step in range(2, 6):
        run.log_metrics({"m": float(step)}, step, flush=True)
    run.end()
    tracker.finish()
    assert tracker._writer is not None and tracker.left == 0
    assert history(tracker, run) == [(s, float(s)) for s in range(1, 6)]


def test_a_writer_for_many_short_jobs_has_each_wait_until_the_store_has_its_records(
    tmp_path, monkeypatch
):
    """`jobs_wait`: each job's end returns once the store has all its records (read right
    after, as a single run's caller does), with no writer of its own; a job whose shared
    writer is gone before its end starts its own and still loses nothing."""
    writer = SharedWriter(tmp_path / "session", drain_timeout=30.0, jobs_wait=True)
    assert writer.start()
    monkeypatch.setenv(WRITER_ENV, str(writer_file(writer.home)))
    try:
        for number in range(3):
            tracker = job(tmp_path, tmp_path / "runs", number)
            run = log_job(tracker, 12, f"short{number}")
            assert tracker.finish() == 0 and tracker._writer is None
            assert history(tracker, run) == [(s, float(s)) for s in range(1, 13)]
        last = job(tmp_path, tmp_path / "runs", 9)
        run = log_job(last, 4, "last")
        os.kill(writer._proc.pid, signal.SIGKILL)
        writer._proc.wait(timeout=10)
        assert last.finish() == 0 and last._writer is not None
        assert history(last, run) == [(s, float(s)) for s in range(1, 5)]
    finally:
        writer.stop()
