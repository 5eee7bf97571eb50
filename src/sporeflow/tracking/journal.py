"""The tracking journal: every MLflow write of a process, appended to a file before it counts.

One journal per writing process, in the dir it writes for (a run dir, a sweep dir):
`<dir>/tracking/<stamp>-<pid>.jsonl`. Each line is one JSON record `{"seq": n, "op": ...}`;
seq 0 is the header naming the store. A line is written whole and flushed to the OS at once
(a SIGKILL of the process loses nothing written); `sync()` fsyncs it (at every epoch end,
checkpoint and exit: a power cut loses at most the current epoch). A torn last line (power
cut mid-write) is ignored by readers: it waits, as a line being appended does, until it ends.
A whole line that is not a record (not JSON, or JSON without an integer `seq` and an `op`: a
stray `echo >>`, a disk error) costs that line only: every reader (the writers, the drain at a
job's end, `sporeflow sync`) parses lines through `parse_line`, which sets it aside in
`<stem>.set-aside.txt` (`line <n>: <the line>`), says so once in one warning line, and skips it;
the records around it are applied. A line is set aside once, whichever process reads it first.

Beside it, `<stem>.applied.json` is the writer's durable position: the last seq applied to the
store, the MLflow id of each run the journal created, which runs are still open, and the seq
range in flight when the writer may have died mid-write (replayed with de-duplication).

Runs created through a journal are named by a key (`sf-...`) until the store gives them an
id; records refer to runs by key or by MLflow id. No MLflow here: the training process only
appends JSON.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
import uuid
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, TypeGuard

from sporeflow.storage.files import DiskFullError, disk_full, no_space, write_text_atomic
from sporeflow.storage.locks import exclusive

log = logging.getLogger(__name__)


class Op(str, Enum):
    """The kinds of journal record: the tracker writes them, the applier dispatches on them
    (a str enum: a record's `op` is its plain value in the JSON line)."""

    header = "header"  # seq 0: the store, experiment, artifact root and owner
    create_run = "create_run"
    resume = "resume"
    params = "params"
    tags = "tags"
    metrics = "metrics"
    artifact = "artifact"
    text = "text"
    dataset = "dataset"  # a split as an MLflow dataset input
    model = "model"  # a serving.package directory, logged as a python_function model
    link_model = "link_model"  # a pipeline's run lists stage 2's model
    register = "register"  # a sweep's best model, a new registry version
    experiment_tag = "experiment_tag"  # a sweep's saved view
    end = "end"
    delete = "delete"
    close = "close"  # the owner is done: the writer drains and exits


# the fields each kind of record must hold to be applied (what Tracker and TrackedRun write and
# tracking.apply reads): a record without one is set aside like a line that is not JSON
_RUN = ("run", "t")
FIELDS: dict[str, tuple[str, ...]] = {  # the header is read apart (header_of), and refused whole
    Op.create_run: (*_RUN, "name", "tags"),
    Op.resume: (*_RUN, "process"),
    Op.params: (*_RUN, "params"),
    Op.tags: (*_RUN, "tags"),
    Op.metrics: (*_RUN, "points"),
    Op.artifact: (*_RUN, "path"),
    Op.text: (*_RUN, "text", "file"),
    Op.dataset: (*_RUN, "name", "location", "files", "rows", "context"),
    Op.model: (*_RUN, "name", "dir", "example", "input", "classes", "step", "tags"),
    Op.link_model: (*_RUN, "source", "name"),
    Op.register: (*_RUN, "source", "stage", "name", "tags"),
    Op.experiment_tag: ("key", "value"),
    Op.end: (*_RUN, "status"),
    Op.delete: _RUN,
    Op.close: (),
}

KEY_PREFIX = "sf-"
RUN_KEY = re.compile(rf"^{KEY_PREFIX}[0-9a-f]{{{32 - len(KEY_PREFIX)}}}$")
DIR_NAME = "tracking"
SUFFIX = ".jsonl"


def new_run_key() -> str:
    """A run's name in the journal until the store gives it an id (as long as an MLflow id)."""
    return KEY_PREFIX + uuid.uuid4().hex[: 32 - len(KEY_PREFIX)]


def is_key(ref: str | None) -> bool:
    return bool(ref) and str(ref).startswith(KEY_PREFIX)


def is_run_key(name: str) -> bool:
    """Whether a user's `name` is a run key as new_run_key makes them (sporeflow_run.json
    holds it): checked whole, as it goes into a store's search filter."""
    return bool(RUN_KEY.match(name))


def run_ref(ref: str) -> dict:
    """A tag value that names a run: the writer puts the run's MLflow id in its place."""
    return {"$run": ref}


class Journal:
    """Append-only record of one process's tracking writes."""

    def __init__(self, path: Path, header: dict[str, Any]):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")
        self.seq = 0
        self._full: DiskFullError | None = None  # the device filled: nothing more is written
        self._write({"seq": 0, "op": Op.header.value, **header})

    @classmethod
    def create(cls, owner_dir: Path, header: dict[str, Any]) -> Journal:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        return cls(Path(owner_dir) / DIR_NAME / f"{stamp}-{os.getpid()}{SUFFIX}", header)

    def _write(self, record: dict) -> None:
        """One whole line, flushed to the OS. A full device is one DiskFullError naming the
        journal (no traceback), and every later append raises it again without writing: a line
        after a torn one would be glued to it."""
        if self._full is not None:
            raise self._full
        try:
            self._file.write(json.dumps(record, default=str, separators=(",", ":")) + "\n")
            self._file.flush()  # in the OS now: survives the death of this process
        except OSError as ex:
            if not no_space(ex):
                raise
            self._full = disk_full(self.path)
            raise self._full from None

    def append(self, op: Op, **fields: Any) -> int:
        self.seq += 1
        self._write({"seq": self.seq, "op": Op(op).value, "t": int(time.time() * 1000), **fields})
        return self.seq

    def sync(self) -> None:
        """Durable on disk (fsync): what is appended so far survives a power cut."""
        if not self._file.closed and self._full is None:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if self._file.closed:
            return
        if self._full is not None:  # what the full device did not take stays unwritten
            with contextlib.suppress(OSError):
                self._file.close()
            return
        self.sync()
        self._file.close()


def read_records(path: Path, after: int = -1) -> list[dict]:
    """The journal's whole records with seq > after, in order (a torn or unfinished last line
    is left out; a line that is not a record is set aside: `parse_line`)."""
    return JournalTail(path).records_after(after)


class JournalTail:
    """A journal read as it grows: each call parses only the whole lines appended since the
    last one (the writer looks every 0.2 s during training; re-reading the file each time
    would cost the trainer CPU in proportion to the run's length)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._offset = 0  # bytes of whole lines parsed so far
        self._lines = 0  # whole lines parsed so far (a set-aside line is named by its number)
        self._records: list[dict] = []  # parsed, not yet known to be applied

    def records_after(self, seq: int) -> list[dict]:
        """Whole records with seq > `seq`, in order (a torn or unfinished last line waits)."""
        self._read_new()
        self._records = [r for r in self._records if r["seq"] > seq]
        return list(self._records)

    def _read_new(self) -> None:
        try:
            if os.stat(self.path).st_size <= self._offset:
                return
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        whole = data.rfind(b"\n") + 1  # only lines that ended: the last may be mid-append
        for line in _lines_of(data[:whole]):
            self._lines += 1
            record = parse_line(self.path, self._lines, line)
            if record is not None:
                self._records.append(record)
        self._offset += whole


def _lines_of(whole: bytes) -> list[str] | list[bytes]:
    """Whole lines, decoded at once (a line that is not UTF-8 is one json.loads fails on: then
    each line is decoded by itself, the others still read)."""
    try:
        return whole.decode("utf-8").split("\n")[:-1]
    except UnicodeDecodeError:
        return whole.split(b"\n")[:-1]


ASIDE = ".set-aside.txt"  # beside the journal: its whole lines that are not records
_set_aside: set[tuple[str, int]] = set()  # (journal, line number) this process knows set aside


def parse_line(journal: Path, number: int, line: str | bytes) -> dict | None:
    """Journal line `number` (1-based, whole, without its newline) as its record; None for an
    empty line, and for one that is not a record, which is set aside (`set_aside`) instead of
    stopping the reader: one bad line costs that line only."""
    if not line.strip():
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested beyond parsing
        set_aside(journal, number, line, "not JSON")
        return None
    if not _is_record(record):
        set_aside(journal, number, line, "JSON, but not a record with an integer seq and an op")
        return None
    missing = [name for name in FIELDS.get(record["op"], ()) if name not in record]
    if missing:
        set_aside(journal, number, line, f"a {record['op']} record without {', '.join(missing)}")
        return None
    return record


def _is_record(found: Any) -> TypeGuard[dict]:
    return (
        isinstance(found, dict)
        and type(found.get("seq")) is int
        and isinstance(found.get("op"), str)
    )


def set_aside(journal: Path, number: int, line: str | bytes, why: str) -> None:
    """Keep line `number` in `<stem>.set-aside.txt` and say so in one warning line, once for
    the journal whichever process reads it first (the file is locked, and names the lines it
    holds: the writer, the job's end and `sporeflow sync` each read the journal again)."""
    journal = Path(journal)
    if (str(journal), number) in _set_aside:
        return
    aside = sibling(journal, ASIDE)
    try:
        with exclusive(aside):
            held = re.findall(rb"^line (\d+): ", aside.read_bytes(), flags=re.MULTILINE)
            new = str(number).encode() not in held
            if new:
                with open(aside, "ab") as f:
                    raw = line.encode() if isinstance(line, str) else line
                    f.write(b"line %d: %s\n" % (number, raw))
    except OSError as ex:  # a read-only dir (another user's run): skipped, said once here
        log.warning(
            "%s: line %d is not a tracking record (%s); skipped: it could not be set aside in "
            "%s (%s)",
            journal,
            number,
            why,
            aside,
            ex,
        )
        new = False
    _set_aside.add((str(journal), number))
    if new:
        log.warning(
            "%s: line %d is not a tracking record (%s): set aside in %s; the rest of the "
            "journal is applied",
            journal,
            number,
            why,
            aside,
        )


class NoHeader(ValueError):
    """A journal whose line 1 is not its header: none of its records can be applied (the
    header names their store, experiment and owner), so it is refused whole, never set aside.
    `why` says what line 1 is instead."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path} is not a sporeflow tracking journal: its line 1 is {why}")
        self.path, self.why = Path(path), why


def header_of(path: Path) -> dict:
    """The journal's header (its first line only: a sweep's writer reads every job's);
    NoHeader when line 1 is not one."""
    with open(path, "rb") as f:
        line = f.readline()
    if not line.endswith(b"\n"):
        raise NoHeader(path, "unfinished (no end of line)" if line else "missing (empty file)")
    try:
        first = json.loads(line)
    except (ValueError, RecursionError):
        raise NoHeader(path, "not JSON") from None
    if not isinstance(first, dict) or first.get("op") != Op.header:
        raise NoHeader(path, 'JSON, but not a header record ({"seq": 0, "op": "header", ...})')
    return first


def journals_under(root: Path) -> list[Path]:
    """Every journal in a run or sweep dir (its jobs' run dirs included), oldest first."""
    root = Path(root)
    found = list(root.glob(f"{DIR_NAME}/*{SUFFIX}")) + list(root.glob(f"**/{DIR_NAME}/*{SUFFIX}"))
    return sorted(set(found), key=lambda p: (p.stat().st_mtime, str(p)))


PROBLEM = ".writer.problem"  # beside the journal while the store cannot be reached: why


def sibling(journal: Path, suffix: str) -> Path:
    """`<stem>.applied.json`, `<stem>.writer.log`, `<stem>.writer.pid` beside a journal."""
    return journal.with_name(journal.name[: -len(SUFFIX)] + suffix)


@dataclass
class AppliedState:
    """How far the store has the journal (see the module docstring). Saved atomically."""

    seq: int = 0
    runs: dict[str, str] = field(default_factory=dict)  # key -> MLflow run id
    open: list[str] = field(default_factory=list)  # runs created/resumed here, not ended yet
    in_flight: list[int] | None = None  # [first, last] seq being written when last saved
    rejected: int = 0  # records the store refused (named in the writer's log)
    versions: dict[str, str] = field(default_factory=dict)  # register seq -> version ("" none)

    @classmethod
    def load(cls, journal: Path) -> AppliedState:
        try:
            return cls(**json.loads(sibling(journal, ".applied.json").read_text()))
        except (OSError, ValueError, TypeError):
            return cls()

    def save(self, journal: Path) -> None:
        write_text_atomic(sibling(journal, ".applied.json"), json.dumps(asdict(self)))


def applied_run_id(run_dir: Path, key: str) -> str | None:
    """The MLflow id the store gave run `key`, as the writers of `run_dir`'s journals applied
    it (None: not applied yet, or no such journal)."""
    journals = sorted((Path(run_dir) / DIR_NAME).glob(f"*{SUFFIX}"))
    found = (AppliedState.load(journal).runs.get(key) for journal in journals)
    return next((run_id for run_id in found if run_id), None)


def last_seq(journal: Path) -> int:
    """The seq of the journal's last whole record (0: only its header, or none)."""
    records = read_records(journal)
    return records[-1]["seq"] if records else 0


def pending(journal: Path) -> int:
    """Records of the journal the store does not have yet."""
    return len(read_records(journal, AppliedState.load(journal).seq))
