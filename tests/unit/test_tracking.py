"""The tracking journal and its writer against a real sqlite store, a real writer process and
a real (unreachable) HTTP address. No MindSpore: the tracker is exercised as a library."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from sporeflow.tracking.apply import Applier
from sporeflow.tracking.journal import (
    PROBLEM,
    AppliedState,
    Journal,
    JournalTail,
    read_records,
    sibling,
)
from sporeflow.tracking.sqlite_store import empty_store
from sporeflow.tracking.store import Store, default_uri, flatten, resolve_uri
from sporeflow.tracking.store_reads import StoreReads
from sporeflow.tracking.tracker import PROBLEM_LOOK_S, Tracker


def config(**kw):
    return SimpleNamespace(**{"uri": None, "experiment_name": "t", "enabled": True, **kw})


def closed_port() -> int:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_flatten_nests_and_stringifies():
    flat = flatten({"optimizer": {"lr": 0.1, "nested": {"a": [1, 2]}}, "epochs": 3})
    assert flat == {"optimizer.lr": "0.1", "optimizer.nested.a": "[1, 2]", "epochs": "3"}


def test_uri_precedence(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resolve_uri(None, tmp_path) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert resolve_uri(None, tmp_path) == "sqlite:////elsewhere.db"
    assert resolve_uri("http://127.0.0.1:5000", tmp_path) == "http://127.0.0.1:5000"


def write_a_run(tracker: Tracker, tmp_path: Path, steps: int = 1200):
    parent = tracker.start_run("parent", tags={"stage": "pipeline"})
    run = tracker.start_run("r", tags={"stage": "train"}, parent=parent)
    run.log_params({f"p{i}": i for i in range(150)})  # more than one MLflow batch
    for step in range(1, steps + 1):  # more than one metric batch
        run.log_metrics({"train/loss": 1.0 / step}, step)
        if step % 400 == 0:
            run.flush()
    (tmp_path / "w.ckpt").write_bytes(b"weights")
    run.log_artifact(tmp_path / "w.ckpt", "checkpoints")
    parent.set_tags({"best_child": run.run_id})  # a tag naming a run by its journal key
    run.end("FINISHED")
    parent.end("FINISHED")
    return parent, run


def test_a_journalled_run_reaches_the_store_whole_through_the_writer(tmp_path):
    tracker = Tracker.from_config(config(), tmp_path, journal_dir=tmp_path / "run")
    assert tracker.uri == default_uri(tmp_path)
    with tracker:
        parent, run = write_a_run(tracker, tmp_path)
        assert run.run_id.startswith("sf-")  # a key until the writer creates the run
    assert tracker.left == 0
    ids = tracker.applied().runs
    client = MlflowClient(tracker.uri)
    got = client.get_run(ids[run.run_id])
    assert got.info.status == "FINISHED"
    assert got.data.params["p149"] == "149" and len(got.data.params) == 150
    assert got.data.tags["mlflow.parentRunId"] == ids[parent.run_id]
    assert client.get_run(ids[parent.run_id]).data.tags["best_child"] == ids[run.run_id]
    history = client.get_metric_history(ids[run.run_id], "train/loss")
    assert [m.step for m in history] == list(range(1, 1201))
    assert [a.path for a in client.list_artifacts(ids[run.run_id], "checkpoints")] == [
        "checkpoints/w.ckpt"
    ]
    location = client.get_experiment_by_name("t").artifact_location
    assert location == (tmp_path.resolve() / "mlartifacts" / "t").as_uri()
    assert "mlflow" not in _modules_imported_by_journalling(tmp_path)


def _modules_imported_by_journalling(tmp_path: Path) -> set[str]:
    """The top-level modules a fresh interpreter has after journalling a run (its writer may
    import anything: it is another process)."""
    code = (
        "import sys; from types import SimpleNamespace as S; from pathlib import Path;"
        "from sporeflow.tracking.tracker import Tracker;"
        f"t = Tracker.from_config(S(uri=None, experiment_name='t', enabled=True), Path({str(tmp_path)!r}),"
        f" journal_dir=Path({str(tmp_path / 'fresh')!r}));"
        "r = t.start_run('x'); r.log_metrics({'m': 1.0}, 1, flush=True); r.end(); t.finish();"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(out.stdout.split())


def test_a_replay_after_a_writer_died_mid_write_duplicates_nothing(tmp_path):
    """The writer saves the range in flight before each write; found again at the next start,
    that range is replayed with checks: the run is found by its key, not created twice; metric
    points already stored are not sent again."""
    tracker = Tracker.from_config(config(), tmp_path, journal_dir=tmp_path / "run")
    with tracker:
        _, run = write_a_run(tracker, tmp_path, steps=50)
    state = AppliedState.load(tracker.journal)
    last = state.seq
    # as if the writer died after sending everything but before saving its position
    AppliedState(in_flight=[1, last]).save(tracker.journal)
    applier = Applier(tracker.journal)
    assert applier.apply_pending() == last
    assert applier.state.runs == state.runs
    client = MlflowClient(tracker.uri)
    experiment = client.get_experiment_by_name("t").experiment_id
    assert len(client.search_runs([experiment])) == 2
    history = client.get_metric_history(state.runs[run.run_id], "train/loss")
    assert [m.step for m in history] == list(range(1, 51))


def test_an_unreachable_store_keeps_the_records_and_says_how_to_send_them(tmp_path, capsys):
    uri = f"http://127.0.0.1:{closed_port()}"
    tracker = Tracker.from_config(
        config(uri=uri, drain_timeout=1.0), tmp_path, journal_dir=tmp_path / "run"
    )
    with tracker:
        write_a_run(tracker, tmp_path, steps=10)  # its first record looks at the server: said
        said = capsys.readouterr().err.splitlines()
        problem = sibling(tracker.journal, PROBLEM)
        deadline = time.monotonic() + 60
        while not problem.exists():  # the writer's first try, within seconds
            assert time.monotonic() < deadline, "the writer never said why it cannot send"
            time.sleep(0.1)
        time.sleep(PROBLEM_LOOK_S)
        tracker.start_run("late")  # the writer's problem now: not said again
        tracker.start_run("later")
        assert capsys.readouterr().err == ""
        why = problem.read_text()
    records = read_records(tracker.journal, 0)
    assert tracker.left == len(records) > 0
    assert why.startswith(f"connect to {uri}: ")
    assert said == [
        f"[sporeflow] tracking: {why}; training goes on, its records wait in {tracker.journal} "
        "and are sent once the store answers"
    ]
    err = capsys.readouterr().err
    assert (
        f"{tracker.left} tracking records of run parent are kept in {tracker.journal}; "
        f"send them with: sporeflow sync {tmp_path / 'run'}"
    ) in err
    assert "try 1 failed" in sibling(tracker.journal, ".writer.log").read_text()


def test_a_server_that_does_not_answer_is_said_at_the_first_record(tmp_path, capsys):
    """At once, not when the writer (importing MLflow first) tries it seconds later."""
    uri = f"http://127.0.0.1:{closed_port()}"
    tracker = Tracker.from_config(
        config(uri=uri, drain_timeout=0.1), tmp_path, journal_dir=tmp_path / "run"
    )
    with tracker:
        tracker.start_run("first")
        (said,) = capsys.readouterr().err.splitlines()  # the writer process has just started
    assert said.startswith(f"[sporeflow] tracking: connect to {uri}: ")
    assert said.endswith(
        f"its records wait in {tracker.journal} and are sent once the store answers"
    )


LEFT_OPEN = """
import sys
from pathlib import Path
from types import SimpleNamespace
from sporeflow.tracking.tracker import Tracker
root = Path(sys.argv[1])
config = SimpleNamespace(uri=None, experiment_name="t", enabled=True)
with Tracker.from_config(config, root, journal_dir=root / "run") as tracker:
    run = tracker.start_run("r", tags={"stage": "train"})
    run.log_metrics({"m": 1.0}, 1)
    run.set_tags({"sporeflow.requeues": "1"})  # what a job stopped for a requeue leaves
"""


def test_sync_leaves_open_the_runs_of_a_journal_its_owner_closed(tmp_path, monkeypatch):
    """A job stopped for a SLURM requeue closes its journal with its run left RUNNING (the
    requeued job continues it). Its process is gone, but `sporeflow sync` of the dir, while
    the job waits in the queue, must not end that run KILLED: only a journal whose owner died
    without closing it (a crash) has its open runs ended."""
    from sporeflow.tracking.sync import sync

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    child = subprocess.run(
        [sys.executable, "-c", LEFT_OPEN, str(tmp_path)], capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    (synced,) = sync(tmp_path / "run")
    assert (synced.sent, synced.left, synced.ended, synced.busy) == (0, 0, (), False)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    assert run.info.status == "RUNNING" and run.data.tags["sporeflow.requeues"] == "1"
    assert "sporeflow.closed" not in run.data.tags


def test_a_killed_writer_is_replaced_and_nothing_is_lost(tmp_path):
    tracker = Tracker.from_config(config(), tmp_path, journal_dir=tmp_path / "run")
    with tracker:
        run = tracker.start_run("r")
        run.log_metrics({"m": 1.0}, 1, flush=True)
        assert tracker.wait_applied(60)
        first = tracker._writer
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        for step in range(2, 6):
            run.log_metrics({"m": float(step)}, step, flush=True)  # flush notices, restarts
        run.end()
        assert tracker._writer.pid != first.pid
    client = MlflowClient(tracker.uri)
    history = client.get_metric_history(tracker.applied().runs[run.run_id], "m")
    assert [(m.step, m.value) for m in history] == [(s, float(s)) for s in range(1, 6)]


def test_a_record_the_store_refuses_is_counted_said_and_fails_the_process(tmp_path, capsys):
    """Never dropped in silence: the rest is applied, the refused record stays in the journal,
    the console names how many and where, and the process ends with an error (exit 1)."""
    from sporeflow.tracking.tracker import RecordsRefused

    tracker = Tracker.from_config(config(), tmp_path, journal_dir=tmp_path / "run")
    with pytest.raises(
        RecordsRefused, match="refused 1 tracking records of run r: they are kept in"
    ):
        with tracker:
            run = tracker.start_run("r")
            run.log_artifact(tmp_path / "gone.bin")  # removed before the writer gets to it
            run.log_metrics({"m": 1.0}, 1)
            run.end()
    said = capsys.readouterr().err
    assert f"they are kept in {tracker.journal}" in said and ".writer.log says why" in said
    assert any(r["op"] == "artifact" for r in read_records(tracker.journal))
    state = tracker.applied()
    assert state.rejected == 1 and state.seq == read_records(tracker.journal)[-1]["seq"]
    assert "no longer exists" in sibling(tracker.journal, ".writer.log").read_text()
    got = MlflowClient(tracker.uri).get_run(state.runs[run.run_id])
    assert got.info.status == "FINISHED" and got.data.metrics == {"m": 1.0}


def test_jobs_that_log_one_data_set_at_once_each_get_it_and_none_is_refused(tmp_path):
    """MLflow's log_inputs looks for the data set, then inserts it: writers started together
    each find none, and all but one lose the insert (UNIQUE constraint, BAD_REQUEST). The
    window is widened here after MLflow's own look (a sleep on the real engine), so every
    writer but one loses it; each must still get the data set, as one row of the store."""
    import threading

    from sqlalchemy import event

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    data = tmp_path / "train.bin"
    data.write_bytes(b"images")
    stores = [Store(uri, "together") for _ in range(4)]
    runs = [s.create_run(f"job{i}", {}, int(time.time() * 1000)) for i, s in enumerate(stores)]
    engine = stores[0].client._tracking_client.store.engine
    looked = []

    def widen(conn, cursor, statement, *args):
        if statement.lstrip().startswith("SELECT") and "FROM datasets" in statement:
            looked.append(statement)
            time.sleep(0.3)

    event.listen(engine, "after_cursor_execute", widen)
    record = {
        "name": "digits-train",
        "files": [str(data)],
        "selection": "all",
        "location": str(data),
        "rows": 45,
        "context": "training",
    }
    start, failures = threading.Barrier(len(stores)), []

    def log(i):
        start.wait()
        try:
            stores[i].log_dataset(runs[i], record)
        except Exception as ex:  # noqa: BLE001 - collected and asserted below
            failures.append(ex)

    try:
        threads = [threading.Thread(target=log, args=(i,)) for i in range(len(stores))]
        [t.start() for t in threads]
        [t.join(timeout=120) for t in threads]
    finally:
        event.remove(engine, "after_cursor_execute", widen)
    assert failures == []
    assert len(looked) > len(stores)  # the losers looked again
    client = MlflowClient(uri)
    digests = {client.get_run(r).inputs.dataset_inputs[0].dataset.digest for r in runs}
    assert len(digests) == 1
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        assert db.execute("SELECT count(*) FROM datasets").fetchone() == (1,)


def test_the_journal_is_json_lines_with_a_header_naming_the_store(tmp_path):
    tracker = Tracker.from_config(config(drain_timeout=5.0), tmp_path, journal_dir=tmp_path)
    with tracker:
        tracker.start_run("r").end()
    lines = [json.loads(x) for x in tracker.journal.read_text().splitlines()]
    assert [r["seq"] for r in lines] == list(range(len(lines)))
    assert lines[0]["op"] == "header" and lines[0]["uri"] == tracker.uri
    assert lines[0]["owner"]["pid"] == os.getpid() and lines[0]["drain_timeout"] == 5.0
    assert [r["op"] for r in lines[1:]] == ["create_run", "end", "close"]


def test_a_tail_of_a_growing_journal_reads_what_a_full_read_reads(tmp_path):
    """The writer's incremental reader against a full re-read (the reference), while lines are
    appended, one of them left unfinished as by a process killed mid-write."""
    journal = Journal(tmp_path / "j.jsonl", {"uri": "x", "experiment": "t"})
    tail = JournalTail(journal.path)
    assert tail.records_after(-1) == read_records(journal.path)
    for step in range(5):
        journal.append("metrics", run="r", points=[["m", float(step), 0, step]])
        assert tail.records_after(-1) == read_records(journal.path)
    with open(journal.path, "a") as f:  # a torn line: neither reader returns it
        f.write('{"seq": 6, "run": "r", "t": 0, "op": "met')
    assert tail.records_after(2) == read_records(journal.path, 2)
    with open(journal.path, "a") as f:
        f.write('rics", "points": []}\n')
    assert tail.records_after(2) == read_records(journal.path, 2)
    assert [r["seq"] for r in tail.records_after(4)] == [5, 6]


@pytest.mark.parametrize("enabled, read_only", [(False, False), (True, True)])
def test_a_tracker_that_does_not_write_leaves_no_journal(tmp_path, enabled, read_only):
    tracker = Tracker.from_config(config(enabled=enabled), tmp_path, read_only=read_only)
    with tracker:
        run = tracker.start_run("r")
        run.log_metrics({"m": 1.0}, 1, flush=True)
        run.end()
    assert run.run_id is None and tracker.journal is None
    assert not list(tmp_path.rglob("*.jsonl"))


KILLED_MID_MIGRATION = """
import os, signal, sys
import mlflow.store.db.utils as db_utils
from sporeflow.tracking.store import Store

def die(engine):  # the initial tables exist, no migration has run: the window a kill can hit
    os.kill(os.getpid(), signal.SIGKILL)

db_utils._upgrade_db = die
Store(sys.argv[1], "x").connect()
"""


def test_a_process_killed_while_creating_a_sqlite_store_leaves_one_that_opens(
    tmp_path, monkeypatch
):
    """A fresh store takes seconds of MLflow migrations; a process SIGKILLed in them (as a
    writer was in CI) must not leave a half-built database that every later open refuses
    ("table ... already exists")."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    cache = tmp_path / "cache"  # no kept empty store yet: this store's build migrates
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    child = subprocess.run([sys.executable, "-c", KILLED_MID_MIGRATION, uri], timeout=120)
    assert child.returncode == -signal.SIGKILL
    assert not (tmp_path / "mlflow.db").exists()
    store = Store(uri, "x", tmp_path / "artifacts")
    assert store.connect()
    assert MlflowClient(uri).get_experiment_by_name("x") is not None
    assert not (tmp_path / "mlflow.db.creating").exists()
    kept = cache / "sporeflow" / "mlflow" / f"empty-store-mlflow{version('mlflow')}.db"
    assert kept.is_file() and not list(kept.parent.glob(".*"))  # the killed build's file is gone


def schema(db: Path) -> set:
    """Every table and index as a set of its lines (MLflow's migrations order a table's
    constraints differently from one build to the next), and the migration head."""
    with sqlite3.connect(db) as con:
        found = {
            frozenset(line.strip().rstrip(",") for line in sql.splitlines())
            for (sql,) in con.execute("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")
        }
        found |= set(con.execute("SELECT version_num FROM alembic_version"))
    con.close()
    return found


def test_a_store_copied_from_the_kept_empty_one_is_the_store_mlflow_builds(tmp_path, monkeypatch):
    """A new sqlite store is a copy of one MLflow migrated (kept in the user cache): the same
    schema and migration head as a store MLflow builds itself, the same "Default" experiment
    location, the kept store's content (a marker put in it here) in every copy."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    by_mlflow = f"sqlite:///{tmp_path}/mlflow_own.db"
    MlflowClient(by_mlflow).search_experiments()
    ours = f"sqlite:///{tmp_path}/ours.db"
    assert Store(ours, "x", tmp_path / "artifacts").connect()
    assert schema(tmp_path / "ours.db") == schema(tmp_path / "mlflow_own.db")
    default = [MlflowClient(u).get_experiment("0") for u in (by_mlflow, ours)]
    assert default[0].name == default[1].name == "Default"
    assert default[0].artifact_location == default[1].artifact_location
    with sqlite3.connect(empty_store()) as kept:
        kept.execute("CREATE TABLE marker (x INTEGER)")
    kept.close()
    assert Store(f"sqlite:///{tmp_path}/second.db", "x").connect()
    assert frozenset(["CREATE TABLE marker (x INTEGER)"]) in schema(tmp_path / "second.db")


@pytest.mark.parametrize(
    "work,waited",
    [
        ("import time; t = time.process_time()\nwhile time.process_time() - t < 4: pass", True),
        ("import time; time.sleep(60)", False),
    ],
    ids=["computing", "sleeping"],
)
def test_the_end_of_a_run_waits_for_a_writer_that_computes_not_for_one_that_sleeps(
    tmp_path, work, waited
):
    """drain_timeout (1 s here) counts seconds without progress: a writer that computes (as a
    niced one importing MLflow on a busy machine does) is waited for; one that only sleeps (as
    between tries of a store that is down) is stopped, and stopping it never raises."""
    import time

    reads = StoreReads("sqlite:///unused.db", "e")
    tracker = Tracker(reads, journal_dir=tmp_path, drain_timeout=1.0)
    writer = subprocess.Popen([sys.executable, "-c", work])
    started = time.monotonic()
    tracker._drain(writer)
    took = time.monotonic() - started
    assert writer.returncode is not None
    if waited:
        assert writer.returncode == 0 and took >= 3.5
    else:
        assert writer.returncode == -signal.SIGTERM and took < 10


def test_a_models_pins_are_still_checked_against_what_is_installed(caplog):
    """Model logging gives MLflow's pin check only the pinned names (mapping every installed
    distribution took 3.3 s): a pin this environment does not satisfy is still warned about,
    a satisfied one is not, and MLflow's own map is left as it was."""
    from mlflow.utils import requirements_utils

    from sporeflow.tracking.models import _pins_checked_alone, requirements

    pins = requirements()
    before = requirements_utils._MODULES_TO_PACKAGES
    with _pins_checked_alone(pins), caplog.at_level("WARNING", logger="mlflow"):
        requirements_utils.warn_dependency_requirement_mismatches(pins)
        assert "mismatches" not in caplog.text
        requirements_utils.warn_dependency_requirement_mismatches(["mindspore==0.0.1"])
    assert "mindspore (current: " in caplog.text and "required: mindspore==0.0.1" in caplog.text
    assert requirements_utils._MODULES_TO_PACKAGES is before


def test_sync_applies_a_job_before_the_parent_it_names_in_one_call(tmp_path):
    """Issue 75 item 2: a sweep dir's journals go by time, and the parent's (written last, at
    the sweep's end) sorts after its jobs': one `sporeflow sync` still applies them all."""
    import os

    from sporeflow.tracking.journal import Journal, Op, new_run_key
    from sporeflow.tracking.sync import sync

    db = tmp_path / "mlflow.db"
    header = {
        "uri": f"sqlite:///{db}",
        "experiment": "sporeflow",
        "artifact_root": str(tmp_path / "artifacts"),
        "owner": {"pid": 2**22 + 7, "host": "elsewhere", "started": 1.0},
        "drain_timeout": 1.0,
        "writer": "own",
    }
    parent, job = new_run_key(), new_run_key()
    first = Journal.create(tmp_path / "sweep", header)
    first.append(Op.create_run, run=parent, name="sweep", tags={}, parent=None)
    first.append(Op.end, run=parent, status="FINISHED")
    first.close()
    second = Journal.create(tmp_path / "sweep" / "0", header)
    second.append(Op.create_run, run=job, name="job", tags={}, parent=parent)
    second.append(Op.end, run=job, status="FINISHED")
    second.close()
    os.utime(first.path, (2e9, 2e9))  # the parent's journal is the newer one
    done = sync(tmp_path / "sweep")
    assert not any(d.error for d in done), [d.error for d in done]
    assert [(d.journal, d.sent, d.left) for d in done] == [(second.path, 2, 0), (first.path, 2, 0)]
    assert not any(d.error for d in done)
