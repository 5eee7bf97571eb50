"""A reuse turn that trained passes once the store has its run, without the job waiting for it:
the turn's flock is handed to a thread (storage.locks.HeldLock.hand_off), and the job's end
waits for what is still handed off (job.reuse.turns_passed). Real flocks, a real tracker with
its writer process, a real sqlite store."""

from __future__ import annotations

import fcntl
import os
import signal
import threading
from pathlib import Path
from types import SimpleNamespace

from mlflow.tracking import MlflowClient

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


def test_a_trained_turn_passes_once_the_store_has_its_run_and_the_job_end_waits(tmp_path):
    """The writer is stopped (SIGSTOP) while the turn ends: the job goes on with the lock still
    held, since the store lacks the run; the job's end (`turns_passed`) starts the writer
    again (SIGCONT here), waits, and leaves the lock free and the run in the store."""
    cfg = SimpleNamespace(uri=None, experiment_name="t", enabled=True)
    tracker = Tracker.from_config(cfg, tmp_path, journal_dir=tmp_path / "run")
    path = tmp_path / "locks" / "fingerprint.lock"
    with tracker:
        run = tracker.start_run("stage1")
        run.log_metrics({"acc": 0.5}, 1, flush=True)
        assert tracker.wait_applied(60)
        writer = tracker._writer
        os.kill(writer.pid, signal.SIGSTOP)
        try:
            with reuse.turns_passed(tracker):
                run.end()
                with exclusive(path) as lock:
                    reuse.published(tracker, "stage1", lock)
                (handed_off, upto) = reuse._HANDED_OFF[0]
                assert handed_off.is_alive() and not free(path)
                assert not tracker.has_applied(upto)
                os.kill(writer.pid, signal.SIGCONT)
        finally:
            os.kill(writer.pid, signal.SIGCONT)
        assert free(path) and not handed_off.is_alive() and reuse._HANDED_OFF == []
        assert tracker.has_applied(upto)
        client = MlflowClient(tracker.uri)
        assert client.get_run(tracker.applied().runs[run.run_id]).info.status == "FINISHED"
