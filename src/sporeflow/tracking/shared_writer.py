"""One tracking writer for all of a sweep's jobs on this machine, seen from outside it.

A writer per job paid MLflow's import and the store's opening (seconds of CPU on a machine the
jobs train on) and made each job's end wait until its writer had drained. The sweep's callback
(entry.sweep_run) starts one `tracking.sweep_writer` process per sweep instead (`SharedWriter`),
and names it to its jobs in `SPOREFLOW_TRACKING_WRITER`: the path of
`<sweep dir>/tracking/writer-<host>.json`, which the writer fills with who it is once it runs.

A job's tracker (`live_writer`) uses it only when that file names a live process on the job's
own host, and then says so in its journal's header (`writer`): that writer follows exactly the
journals that name it, so a job on another host starts its own writer and no journal is ever
followed by two (a SLURM sweep starts none: entry.sweep_run). If the shared writer dies, a
job's tracker starts its own (the journal and its `applied.json` carry the position, as after
any writer's death).
"""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
from pathlib import Path

from sporeflow.core.processes import is_alive
from sporeflow.tracking.drain import drain, wait_while_progressing
from sporeflow.tracking.journal import AppliedState, header_of, last_seq, pending

log = logging.getLogger(__name__)

WRITER_ENV = "SPOREFLOW_TRACKING_WRITER"
START_TIMEOUT_S = 20.0  # a shared writer not up by then: each job starts its own


def writer_file(sweep_dir: Path) -> Path:
    """Who the sweep's writer on this host is (pid, host, process start time), while it runs."""
    return Path(sweep_dir) / "tracking" / f"writer-{socket.gethostname()}.json"


def stop_file(sweep_dir: Path) -> Path:
    """Made by the sweep's end: the writer ends once every journal it follows is done."""
    return Path(sweep_dir) / "tracking" / f"writer-{socket.gethostname()}.stop"


def writer_id(me: dict) -> str:
    """How a journal's header names the process that writes it."""
    return f"{me['pid']}@{me['host']}:{me['started']}"


def _parsed(ident: str) -> dict:
    pid, _, rest = ident.partition("@")
    host, _, started = rest.rpartition(":")
    return {"pid": int(pid), "host": host, "started": float(started)}


def alive(ident: str) -> bool:
    try:
        return bool(is_alive(**_parsed(ident)))
    except ValueError:
        return False


def live_writer(path: str | None, journal_dir: Path) -> str | None:
    """The id of the live shared writer the file at `path` names on this host, if it looks for
    journals of `journal_dir` (the sweep dir or a job's run dir right below it), else None."""
    if not path:
        return None
    sweep_dir, here = Path(path).parent.parent.resolve(), Path(journal_dir).resolve()
    if sweep_dir not in (here, here.parent):  # where journal_candidates looks
        return None
    try:
        ident = writer_id(json.loads(Path(path).read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return ident if alive(ident) else None


def followed(sweep_dir: Path, ident: str) -> list[Path]:
    """The journals under `sweep_dir` (its own, its jobs') whose header names writer `ident`."""
    found = []
    for journal in journal_candidates(sweep_dir):
        try:
            if header_of(journal).get("writer") == ident:
                found.append(journal)
        except (OSError, ValueError):
            continue
    return found


def journal_candidates(sweep_dir: Path) -> list[Path]:
    """The sweep's own journals and those of its jobs' run dirs (`<sweep dir>/<job>/`)."""
    root = Path(sweep_dir)
    return sorted([*root.glob("tracking/*.jsonl"), *root.glob("*/tracking/*.jsonl")])


class SharedWriter:
    """The sweep process's handle on its writer: started once, waited for before the sweep's
    summary reads the store (`flush`), and stopped at the sweep's end (`stop`)."""

    def __init__(self, sweep_dir: Path, drain_timeout: float):
        self.sweep_dir = Path(sweep_dir)
        self.drain_timeout = drain_timeout
        self.ident: str | None = None
        self._proc: subprocess.Popen | None = None

    def start(self) -> bool:
        """Start the writer and wait until it has said who it is (True), or give up."""
        folder = self.sweep_dir / "tracking"
        folder.mkdir(parents=True, exist_ok=True)
        stop_file(self.sweep_dir).unlink(missing_ok=True)
        log_file = folder / f"writer-{socket.gethostname()}.log"
        with open(log_file, "a") as log_out:  # the child keeps its copy
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "sporeflow.tracking.sweep_writer", str(self.sweep_dir)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_out,
                close_fds=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self._proc.poll() is None:
            self.ident = live_writer(str(writer_file(self.sweep_dir)), self.sweep_dir)
            if self.ident is not None:
                return True
            time.sleep(0.05)
        log.warning(
            "the sweep's tracking writer did not start (%s): each job starts its own", log_file
        )
        self.stop()
        return False

    def _journals(self) -> list[Path]:
        return followed(self.sweep_dir, self.ident) if self.ident else []

    def _applied(self, journals: list[Path]) -> int:
        return sum(AppliedState.load(j).seq for j in journals)

    def left(self) -> int:
        """Records of the journals it follows that the store does not have yet."""
        return sum(pending(j) for j in self._journals())

    def flush(self) -> bool:
        """Wait until the store has every record journalled so far (True), while the writer
        gets on (tracking.drain_timeout without progress: False). The journals and their
        lengths are read once; each look after that reads only their `applied.json`."""
        journals = self._journals()
        target = sum(last_seq(j) for j in journals)
        if self._proc is None or self._proc.poll() is not None:
            return self._applied(journals) >= target
        return wait_while_progressing(
            self._proc.pid,
            lambda: self._applied(journals),
            self.drain_timeout,
            lambda: self._applied(journals) >= target,
        )

    def stop(self) -> int:
        """Ask the writer to end once every journal it follows is done, wait for it while it
        gets on, and return the records left (kept in the journals for `sporeflow sync`)."""
        if self._proc is None:
            return 0
        stop_file(self.sweep_dir).touch()
        journals = self._journals()
        drain(self._proc, lambda: self._applied(journals), self.drain_timeout)
        self._proc = None
        stop_file(self.sweep_dir).unlink(missing_ok=True)
        return self.left()
