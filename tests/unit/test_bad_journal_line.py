"""A bad journal line costs that line only (issue 75, item 3): a whole line that is not a
record (`echo 'not json' >> <journal>`) is set aside in `<stem>.set-aside.txt`, named in one
warning line, and every other record is applied - by the writer (a real process, during a
run), by `sporeflow sync`, and by whichever reader meets it again later (set aside once).
Real sqlite MLflow stores; the journals are written by real (then finished) processes."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from mlflow.tracking import MlflowClient

from sporeflow.entry.cli import main as cli_main
from sporeflow.tracking.apply import Applier
from sporeflow.tracking.journal import ASIDE, JournalTail, read_records, sibling
from sporeflow.tracking.tracker import Tracker

RECORDS = 25  # seq 1..25: create_run, 22 metrics records, end, close
BAD_SEQ = 12  # the record whose line is replaced by a bad one: line 13 (line 1 is the header)
BAD_LINE = BAD_SEQ + 1

WRITE_A_JOURNAL = """
import sys
from pathlib import Path
from sporeflow.core.processes import this_process
from sporeflow.tracking.journal import Journal, Op, new_run_key
root = Path(sys.argv[1])
header = {"uri": f"sqlite:///{root}/mlflow.db", "experiment": "t", "artifact_root": None,
          "owner": this_process(), "drain_timeout": 5.0, "writer": "own"}
journal = Journal.create(root / "run", header)
key = new_run_key()
journal.append(Op.create_run, run=key, name="r", tags={}, parent=None, system_metrics=0.0)
for step in range(1, 23):
    journal.append(Op.metrics, run=key, points=[["m", float(step), 1000 + step, step]])
journal.append(Op.end, run=key, status="FINISHED")
journal.append(Op.close)
journal.close()
print(journal.path)
"""


def unsent_journal(root: Path) -> Path:
    """A 25-record journal in `root`/run that its (finished) process left unsent."""
    child = subprocess.run(
        [sys.executable, "-c", WRITE_A_JOURNAL, str(root)], capture_output=True, text=True
    )
    assert child.returncode == 0, child.stderr
    return Path(child.stdout.strip())


def unsent_journal_with_a_bad_line(root: Path, bad: bytes = b"not json") -> Path:
    """A 25-record journal its (finished) process left unsent, its record seq 12 (line 13)
    replaced by `bad` (`%d`: the seq), as a stray `echo` or a disk error would leave it."""
    journal = unsent_journal(root)
    lines = journal.read_bytes().split(b"\n")
    assert len(lines) == 1 + RECORDS + 1 and b'"seq":%d,' % BAD_SEQ in lines[BAD_LINE - 1]
    lines[BAD_LINE - 1] = bad % BAD_SEQ if b"%d" in bad else bad
    journal.write_bytes(b"\n".join(lines))
    return journal


def set_aside_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "set aside in" in r.getMessage()]


def steps_stored(uri: str) -> tuple[str, list[int]]:
    """The one run's status and its metric `m`'s steps, as stored."""
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("t").experiment_id])
    return run.info.status, [p.step for p in client.get_metric_history(run.info.run_id, "m")]


def test_a_record_without_a_field_its_kind_needs_is_set_aside_and_the_rest_applied(
    tmp_path, caplog
):
    """A metrics record without its points used to stop the applier with a KeyError (and with
    it every later record): it costs that line only, as a line that is not JSON does."""
    journal = unsent_journal_with_a_bad_line(tmp_path, b'{"seq":%d,"op":"metrics","run":"x","t":1}')
    with caplog.at_level(logging.WARNING):
        assert Applier(journal).apply_pending() == RECORDS - 1
    (said,) = set_aside_warnings(caplog)
    assert f"line {BAD_LINE} is not a tracking record (a metrics record without points)" in said
    status, steps = steps_stored(f"sqlite:///{tmp_path}/mlflow.db")
    assert status == "FINISHED" and steps == [s for s in range(1, 23) if s != BAD_SEQ - 1]


def test_a_bad_line_in_the_middle_is_set_aside_and_every_other_record_applied(tmp_path, caplog):
    journal = unsent_journal_with_a_bad_line(tmp_path)
    aside = sibling(journal, ASIDE)
    with caplog.at_level(logging.WARNING):
        applier = Applier(journal)  # what the writer does, and `sporeflow sync`
        assert applier.apply_pending() == RECORDS - 1
    assert aside.read_text() == f"line {BAD_LINE}: not json\n"
    (said,) = set_aside_warnings(caplog)
    assert said.startswith(f"{journal}: line {BAD_LINE} is not a tracking record (not JSON)")
    assert f"set aside in {aside}" in said
    status, steps = steps_stored(f"sqlite:///{tmp_path}/mlflow.db")
    assert status == "FINISHED" and steps == [s for s in range(1, 23) if s != BAD_SEQ - 1]
    assert applier.closed and applier.state.seq == RECORDS

    # read again (a writer started anew, the job's end, another process): nothing applied
    # twice, the line not set aside twice, nothing said again
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert Applier(journal).apply_pending() == 0
        assert [r["seq"] for r in read_records(journal)] == [
            s for s in range(RECORDS + 1) if s != BAD_SEQ
        ]
    assert set_aside_warnings(caplog) == []
    another = subprocess.run(
        [sys.executable, "-c", READ_IT, str(journal)], capture_output=True, text=True
    )
    assert another.returncode == 0 and another.stdout.split() == [str(RECORDS)], another.stderr
    assert another.stderr == ""  # it found the line set aside already: no second warning
    assert aside.read_text() == f"line {BAD_LINE}: not json\n"
    assert steps_stored(f"sqlite:///{tmp_path}/mlflow.db")[1] == steps


READ_IT = """
import sys
from sporeflow.tracking.journal import read_records
print(len(read_records(sys.argv[1])))
"""


def test_sporeflow_sync_sends_every_record_but_the_bad_line(tmp_path, capsys, caplog):
    """Before: a JSONDecodeError traceback, exit 1, 0 of 25 sent."""
    journal = unsent_journal_with_a_bad_line(tmp_path)
    with caplog.at_level(logging.WARNING):
        code = cli_main(["sync", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert (
        out.strip()
        == f"{journal.relative_to(tmp_path / 'run')}: sent {RECORDS - 1} records, 0 left"
    )
    (said,) = set_aside_warnings(caplog)
    assert f"{journal}: line {BAD_LINE} " in said and str(sibling(journal, ASIDE)) in said
    status, steps = steps_stored(f"sqlite:///{tmp_path}/mlflow.db")
    assert status == "FINISHED" and len(steps) == 21
    assert cli_main(["sync", str(tmp_path / "run")]) == 0
    assert "sent 0 records, 0 left" in capsys.readouterr().out


def test_lines_that_are_json_but_not_records_are_set_aside_and_an_unfinished_one_waits(tmp_path):
    """A record has an integer seq and an op; a line without its newline is being appended
    (or was torn by a crash): it waits, it is not set aside."""
    journal = tmp_path / "tracking" / "j.jsonl"
    journal.parent.mkdir()
    journal.write_bytes(
        b'{"seq":0,"op":"header"}\n42\n\n{"seq":"1","op":"tags"}\n{"op":"tags"}\n'
        b'\xff\xfe\n{"seq":1,"op":"tags","run":"r","t":1,"tags":{}}\n{"seq":2,"op":"ta'
    )
    tail = JournalTail(journal)
    assert [r["seq"] for r in tail.records_after(-1)] == [0, 1]
    aside = sibling(journal, ASIDE).read_bytes().splitlines()
    assert aside == [
        b"line 2: 42",
        b'line 4: {"seq":"1","op":"tags"}',
        b'line 5: {"op":"tags"}',
        b"line 6: \xff\xfe",
    ]
    with open(journal, "ab") as f:
        f.write(b'gs","run":"r","t":2,"tags":{}}\nnot json\n')
    assert [r["seq"] for r in tail.records_after(0)] == [1, 2]
    assert sibling(journal, ASIDE).read_bytes().splitlines()[4:] == [b"line 9: not json"]
    assert [r["seq"] for r in read_records(journal)] == [0, 1, 2]


def test_a_bad_line_appended_to_a_running_job_s_journal_costs_that_line_only(tmp_path):
    """Before: the writer crashed at the line (three times: each one started again met it),
    the job's end raised JSONDecodeError and the run stayed RUNNING."""
    config = SimpleNamespace(uri=None, experiment_name="t", enabled=True, drain_timeout=30.0)
    tracker = Tracker.from_config(config, tmp_path, journal_dir=tmp_path / "run")
    with tracker:
        run = tracker.start_run("r")
        for step in range(1, 6):
            run.log_metrics({"m": float(step)}, step, flush=True)
        assert tracker.wait_applied(60)  # the writer follows the journal
        writer = tracker._writer
        with open(tracker.journal, "a") as f:
            f.write("not json\n")  # `echo 'not json' >> <journal>` mid-run
        for step in range(6, 11):
            run.log_metrics({"m": float(step)}, step, flush=True)
        run.end()
    assert tracker.left == 0 and tracker._writer is writer and writer.returncode == 0
    status, steps = steps_stored(tracker.uri)
    assert status == "FINISHED" and steps == list(range(1, 11))
    aside = sibling(tracker.journal, ASIDE)
    assert aside.read_text() == "line 8: not json\n"  # header, create_run, 5 metrics, it
    said = [
        line
        for line in sibling(tracker.journal, ".writer.log").read_text().splitlines()
        if "set aside in" in line
    ]
    assert len(said) == 1 and f"{tracker.journal}: line 8 " in said[0] and str(aside) in said[0]


@pytest.mark.parametrize(
    ("line_1", "why"),
    [
        (b"not json", "not JSON"),
        (b'{"seq":0,"op":"metrics","run":"x","t":1,"points":[]}', "JSON, but not a header"),
    ],
)
def test_a_journal_without_its_header_is_named_and_every_other_journal_synced(
    tmp_path, capsys, line_1, why
):
    """issue 77 item 5: one journal's line 1 unreadable made `sporeflow sync` print a
    ValueError traceback (exit 1) and send nothing of the other journals. Now that journal is
    named in one line (which file, why, its records unsent, where they stay) and the others
    are applied; exit 1 as records are left."""
    good = unsent_journal(tmp_path)
    bad = unsent_journal(tmp_path)  # another process: a journal of its own
    assert good != bad
    lines = bad.read_bytes().split(b"\n")
    bad.write_bytes(b"\n".join([line_1, *lines[1:]]))
    kept = bad.read_bytes()
    empty = bad.with_name("00000000-000000-1.jsonl")  # a journal a process was starting
    empty.touch()
    code = cli_main(["sync", str(tmp_path / "run")])
    out = capsys.readouterr().out.strip().splitlines()
    assert code == 1, out
    where = {Path(line.split(":", 1)[0]).name: line for line in out}
    assert where.keys() == {good.name, bad.name, empty.name}, out
    assert where[good.name].endswith(f": sent {RECORDS} records, 0 left")
    said = where[bad.name]
    assert said.startswith(f"{bad.relative_to(tmp_path / 'run')}: not sent: its line 1 is {why}")
    assert f"its {RECORDS} records cannot be sent" in said and f"stay as they are in {bad}" in said
    assert "its 0 records cannot be sent" in where[empty.name]
    assert "missing (empty file)" in where[empty.name]
    assert bad.read_bytes() == kept and not sibling(bad, ASIDE).exists()  # left as it was
    status, steps = steps_stored(f"sqlite:///{tmp_path}/mlflow.db")  # the good journal's run
    assert status == "FINISHED" and steps == list(range(1, 23))

    empty.unlink()  # only the bad journal is left unsent: still exit 1; with it gone, 0
    assert cli_main(["sync", str(tmp_path / "run")]) == 1
    bad.unlink()
    assert cli_main(["sync", str(tmp_path / "run")]) == 0
