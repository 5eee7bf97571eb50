"""A reuse turn that trained passes once the store has its run, without the job waiting for it:
the turn's flock is handed to a thread (storage.locks.HeldLock.hand_off), and the job's end
waits for what is still handed off (job.reuse.turns_passed). Real flocks, a real tracker with
its writer process, a real sqlite store."""

from __future__ import annotations

import fcntl
import os
import signal
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from sporeflow.core.signals import Interrupted
from sporeflow.job import reuse
from sporeflow.storage.locks import exclusive
from sporeflow.tracking.tracker import Tracker


def free(path: Path) -> bool:
    """Whether another open of `path` takes its flock at once (it is released at once)."""
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        fcntl.flock(handle, fcntl.LOCK_UN)
        return True


def test_a_lock_is_released_when_its_block_ends_unless_handed_off(tmp_path):
    path = tmp_path / "locks" / "turn.lock"
    with exclusive(path):
        assert not free(path)
    assert free(path)
    go = threading.Event()
    with exclusive(path) as lock:
        thread = lock.hand_off(go.wait)
    assert not free(path)  # the block ended; the thread still holds it
    go.set()
    thread.join(timeout=30)
    assert not thread.is_alive() and free(path)


def test_a_lock_block_that_raises_releases_it(tmp_path):
    path = tmp_path / "turn.lock"
    try:
        with exclusive(path):
            raise RuntimeError("training failed")
    except RuntimeError:
        pass
    assert free(path)


def stopped_writer_tracker(tmp_path: Path, drain_timeout: float):
    """A tracker whose stage-1 run the store has, then its writer stopped (SIGSTOP): records
    written from here on wait in the journal until SIGCONT."""
    cfg = SimpleNamespace(uri=None, experiment_name="t", enabled=True, drain_timeout=drain_timeout)
    tracker = Tracker.from_config(cfg, tmp_path, journal_dir=tmp_path / "run")
    run = tracker.start_run("stage1")
    run.log_metrics({"acc": 0.5}, 1, flush=True)
    assert tracker.wait_applied(60)
    os.kill(tracker._writer.pid, signal.SIGSTOP)
    return tracker, run


def hand_off_turn(tracker: Tracker, path: Path) -> tuple[threading.Thread, int]:
    """A turn that trained ends: its lock handed off (`published`), held while the store lacks
    the run."""
    with exclusive(path) as lock:
        reuse.published(tracker, "stage1", lock)
    handed_off, upto = reuse._HANDED_OFF[-1], tracker.written()
    assert handed_off.is_alive() and not free(path)
    assert tracker.applied().seq < upto
    return handed_off, upto


def wait_free(path: Path, seconds: float = 60.0) -> bool:
    deadline = time.monotonic() + seconds
    while not free(path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def test_a_trained_turn_passes_once_the_store_has_its_run_and_the_job_end_waits(tmp_path):
    """The job goes on with the lock held while its stopped writer lacks the run; once the
    writer goes on (SIGCONT), the lock passes before the job ends; the job's end joins."""
    path = tmp_path / "locks" / "fingerprint.lock"
    tracker, run = stopped_writer_tracker(tmp_path, drain_timeout=60)
    writer = tracker._writer
    with tracker:
        try:
            with reuse.turns_passed(tracker):
                run.end()
                handed_off, upto = hand_off_turn(tracker, path)
                os.kill(writer.pid, signal.SIGCONT)
                assert wait_free(path)  # inside the job: it did not wait for this
                assert tracker.applied().seq >= upto
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        assert not handed_off.is_alive() and reuse._HANDED_OFF == []
        client = MlflowClient(tracker.uri)
        assert client.get_run(tracker.applied().runs[run.run_id]).info.status == "FINISHED"


def test_the_job_end_starts_a_killed_writer_again_and_waits_for_the_turn(tmp_path):
    """The writer dies (SIGKILL) while the turn is handed off: the job's end starts a new one,
    which applies the journal, and the block ends with the lock free and the run stored."""
    path = tmp_path / "locks" / "fingerprint.lock"
    tracker, run = stopped_writer_tracker(tmp_path, drain_timeout=60)
    killed = tracker._writer
    with tracker:
        with reuse.turns_passed(tracker):
            run.end()
            handed_off, upto = hand_off_turn(tracker, path)
            os.kill(killed.pid, signal.SIGKILL)
            killed.wait()
        assert free(path) and not handed_off.is_alive() and reuse._HANDED_OFF == []
        assert tracker.writer_pid() != killed.pid and tracker.applied().seq >= upto
        client = MlflowClient(tracker.uri)
        assert client.get_run(tracker.applied().runs[run.run_id]).info.status == "FINISHED"


def test_a_turn_whose_writer_makes_no_progress_passes_after_drain_timeout(tmp_path, caplog):
    path = tmp_path / "locks" / "fingerprint.lock"
    tracker, run = stopped_writer_tracker(tmp_path, drain_timeout=5.0)
    writer = tracker._writer
    try:
        run.end()
        handed_off, upto = hand_off_turn(tracker, path)
        handed_off.join(timeout=60)
        assert not handed_off.is_alive() and free(path)
        assert tracker.applied().seq < upto  # passed without the run: the next job trains
        assert reuse.NOT_PUBLISHED % "stage1" in caplog.text
    finally:
        reuse._HANDED_OFF.clear()
        os.kill(writer.pid, signal.SIGCONT)
        tracker.finish()


def test_a_job_stopped_by_a_signal_does_not_wait_for_its_turns(tmp_path):
    """Interrupted (SIGINT/SIGTERM) leaves the drain to the tracker's end: turns_passed neither
    waits for the store nor joins the handed-off thread (a wait would take drain_timeout)."""
    path = tmp_path / "locks" / "fingerprint.lock"
    tracker, run = stopped_writer_tracker(tmp_path, drain_timeout=30)
    writer = tracker._writer
    try:
        with pytest.raises(Interrupted):
            with reuse.turns_passed(tracker):
                run.end()
                handed_off, _ = hand_off_turn(tracker, path)
                raise Interrupted(signal.SIGTERM)
        assert handed_off.is_alive() and reuse._HANDED_OFF == []
    finally:
        os.kill(writer.pid, signal.SIGCONT)
        tracker.finish()
    handed_off.join(timeout=60)
    assert free(path)
