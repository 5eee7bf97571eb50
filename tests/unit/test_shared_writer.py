"""One tracking writer for a sweep's jobs (issue 36, item 1): a real sweep-writer process, real
trackers as jobs use them, a real sqlite store. No MindSpore: the tracker is a library here.
Jobs on another host (a SLURM sweep's nodes) meet the writer for real in
e2e/test_slurm_cluster.py; here their journals and the writer's file are written as they
would write them."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest
from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor
from mlflow.tracking import MlflowClient

from sporeflow.tracking import shared_writer
from sporeflow.tracking.apply import Applier
from sporeflow.tracking.journal import AppliedState, Journal, Op, header_of, read_records
from sporeflow.tracking.machine_samples import PREFIX
from sporeflow.tracking.shared_writer import (
    HEARTBEAT_S,
    STALE_S,
    WRITER_ENV,
    SharedWriter,
    live_writer,
    writer_file,
    writer_id,
)
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


def node_journal(sweep: Path, writer: SharedWriter, tracker: Tracker, steps: int) -> Path:
    """A job's journal as a tracker on another host (a SLURM node) writes it: its owner is
    process 1 of host `node-b`, which this machine cannot look at; registered as that job's
    tracker registers it with the sweep's writer (WriterRef.register into the writer host's
    folder)."""
    header = {
        "uri": tracker.uri,
        "experiment": tracker.experiment_name,
        "artifact_root": str(tracker.reads.artifact_root),
        "owner": {"pid": 1, "host": "node-b", "started": 1.0},
        "drain_timeout": 30.0,
        "writer": writer.ident,
    }
    journal = Journal.create(sweep / "7", header)
    journal.append(Op.create_run, run="sf-nodeb", name="on-node-b", tags={}, parent=None)
    points = [["m", float(s), int(time.time() * 1000), s] for s in range(1, steps + 1)]
    journal.append(Op.metrics, run="sf-nodeb", points=points)
    journal.sync()
    live_writer(str(writer_file(sweep))).register(journal.path)
    return journal.path


def test_a_job_on_another_host_is_followed_and_its_runs_left_to_the_sweep(shared):
    """The sweep's writer applies a node's journal, and neither ends its open run KILLED (it
    cannot see the node's process: the sweep ends the runs of jobs the scheduler ended) nor
    keeps the writer from ending at the sweep's stop; the same journal of a process on this
    host that is gone gets its run ended KILLED, as before."""
    launch, sweep, writer = shared
    tracker = job(launch, sweep, 0)
    remote = node_journal(sweep, writer, tracker, 6)
    assert writer.flush() and writer.left() == 0
    client = MlflowClient(tracker.uri)
    run_id = AppliedState.load(remote).runs["sf-nodeb"]
    assert [m.value for m in client.get_metric_history(run_id, "m")] == [
        1.0,
        2.0,
        3.0,
        4.0,
        5.0,
        6.0,
    ]
    time.sleep(1.0)  # the writer looks again: still RUNNING, its owner's end is not its to say
    assert client.get_run(run_id).info.status == "RUNNING"
    pid = writer._proc.pid
    assert writer.stop() == 0 and not psutil.pid_exists(pid)
    assert client.get_run(run_id).info.status == "RUNNING"


def test_a_writer_on_another_host_is_alive_while_its_heartbeat_is_fresh(shared):
    """What a job on a node reads: the writer's file, rewritten with the time every
    HEARTBEAT_S (the beat advances); a copy of it as a writer of host `node-a` would write it
    is alive while the beat is younger than STALE_S, gone once it is older or the file is
    removed, and a file that cannot be parsed just now is no verdict (a live writer must not
    get a second applier)."""
    _, sweep, writer = shared
    first = json.loads(writer_file(sweep).read_text())["beat"]
    time.sleep(HEARTBEAT_S + 0.5)
    me = json.loads(writer_file(sweep).read_text())
    assert me["beat"] > first and writer_id(me) == writer.ident
    there = {**me, "host": "node-a"}
    other = writer_file(sweep, "node-a")
    ident = writer_id(there)
    other.write_text(json.dumps(there))
    assert shared_writer.alive(ident, sweep) and live_writer(str(other)) is not None
    assert live_writer(str(other)).host == "node-a"
    assert not shared_writer.alive(ident)  # without the sweep dir: cannot tell, so not
    other.write_text(json.dumps({**there, "beat": time.time() - STALE_S - 1}))
    assert not shared_writer.alive(ident, sweep) and live_writer(str(other)) is None
    other.write_text('{"pid": ')
    assert shared_writer.alive(ident, sweep)
    other.unlink()
    assert not shared_writer.alive(ident, sweep)


def sampled_steps(journal: Path) -> dict[str, list[int]]:
    """The steps of each `system/` metric a journal holds, in order."""
    steps: dict[str, list[int]] = {}
    for record in read_records(journal):
        for name, _, _, step in record.get("points", []) if record["op"] == "metrics" else []:
            if name.startswith(PREFIX):
                steps.setdefault(name, []).append(step)
    return steps


def test_a_job_whose_writer_is_on_another_host_samples_its_own_machine(shared, monkeypatch):
    """A job's run asks for system metrics every 0.3 s and its writer is the sweep's on host
    node-a (its heartbeat fresh): the run's create record asks that writer to sample nothing
    (it would sample node-a), and the tracker journals the samples itself - named as MLflow's
    own CPU, disk and network monitors name theirs, the disk's figures equal to theirs, steps
    0, 1, ... and one more at the run's end. A later process continuing the run goes on from
    the next step; the store gets each sample once."""
    launch, sweep, _ = shared
    me = {**json.loads(writer_file(sweep).read_text()), "host": "node-a"}
    there = writer_file(sweep, "node-a")
    there.write_text(json.dumps({**me, "beat": time.time()}))
    monkeypatch.setenv(WRITER_ENV, str(there))

    def train(tracker: Tracker, run) -> Path:
        for step in range(1, 4):
            time.sleep(0.35)
            run.log_metrics({"m": float(step)}, step, flush=True)
        run.end()
        tracker.finish()
        Applier(tracker.journal).apply_pending()  # what node-a's writer would do
        return tracker.journal

    first = job(launch, sweep, 0)
    journal = train(first, first.start_run("on-node", system_metrics=0.3))
    assert header_of(journal)["writer"] == writer_id(me) and first._writer is None
    (created,) = [r for r in read_records(journal) if r["op"] == "create_run"]
    assert created["system_metrics"] == 0.0
    steps = sampled_steps(journal)
    monitors = [CPUMonitor(), DiskMonitor(), NetworkMonitor()]
    for monitor in monitors:
        monitor.collect_metrics()
    theirs = {PREFIX + k: v for m in monitors for k, v in m.aggregate_metrics().items()}
    assert sorted(steps) == sorted(theirs)
    assert all(s == list(range(4)) for s in steps.values()), steps  # 3 due, 1 at the end
    run_id = AppliedState.load(journal).runs[created["run"]]
    client = MlflowClient(first.uri)
    mine = client.get_run(run_id).data.metrics
    for name in ("disk_usage_percentage", "disk_available_megabytes"):
        assert mine[PREFIX + name] == pytest.approx(theirs[PREFIX + name], rel=0.01), name

    later = job(launch, sweep, 0)
    again = train(later, later.resume_run(run_id, system_metrics=0.3))
    assert sampled_steps(again)[PREFIX + "cpu_utilization_percentage"] == [4, 5, 6, 7]
    history = client.get_metric_history(run_id, PREFIX + "cpu_utilization_percentage")
    assert sorted(m.step for m in history) == list(range(8))


def test_the_writer_looks_often_while_records_come_and_seldom_after(monkeypatch):
    """writer.Idle: after a look that applied records the next looks come every BUSY_S (a
    stage's end is a burst the next job waits for), and every IDLE_S once BURST_S passed
    without any (the pause it asks for, read from time.sleep)."""
    from sporeflow.tracking import writer

    asked, clock = [], [100.0]
    monkeypatch.setattr(writer.time, "sleep", asked.append)
    monkeypatch.setattr(writer.time, "monotonic", lambda: clock[0])
    idle = writer.Idle()
    idle.pause(0)  # nothing applied yet: a writer just started waits as an idle one
    idle.pause(3)
    clock[0] += writer.BURST_S / 2
    idle.pause(0)
    clock[0] += writer.BURST_S
    idle.pause(0)
    assert asked == [writer.IDLE_S, writer.BUSY_S, writer.IDLE_S]
