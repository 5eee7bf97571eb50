"""One tracking writer for many jobs on this machine, seen from outside it.

A writer per job paid MLflow's import and the store's opening (seconds of CPU on a machine the
jobs train on) and made each job's end wait until its writer had drained. A shared writer
(`SharedWriter`, the `tracking.sweep_writer` process) is started once for many jobs: by a
sweep's callback (entry.sweep_run) for its jobs, or by any caller that runs many short jobs
(the in-process test tier does, one per test process). It is named to jobs in
`SPOREFLOW_TRACKING_WRITER`: the path of `<home>/tracking/writer-<host>.json`, which the writer
fills with who it is once it runs.

A job's tracker (`live_writer`) uses it only when that file names a live process: one of the
job's own host by its pid, one of another host (a SLURM sweep's writer on the submitting
machine, its jobs on the nodes: the sweep dir is on a filesystem they share) by its heartbeat,
the time the writer rewrites into the file every HEARTBEAT_S seconds, younger than STALE_S. The
job then names that writer in its journal's header (`writer`) and registers the journal in
`<home>/tracking/follow-<writer's host>/` (`register`). The writer follows exactly the
registered journals that name it, so no journal is ever followed by two. If the shared writer
dies (or its heartbeat stops), a job's tracker starts its own (the journal and its
`applied.json` carry the position, as after any writer's death). A sweep's job ends once its journal is durable (the
sweep's end waits for the writer once); a writer started with `jobs_wait` has each job wait,
at its end, until the store has its records, as with a writer of its own.
"""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sporeflow.core.processes import is_alive
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.drain import drain, wait_while_progressing
from sporeflow.tracking.journal import AppliedState, header_of, last_seq, pending

log = logging.getLogger(__name__)

WRITER_ENV = "SPOREFLOW_TRACKING_WRITER"
START_TIMEOUT_S = 20.0  # a shared writer not up by then: each job starts its own
HEARTBEAT_S = 2.0  # how often a shared writer rewrites its file with the time (its heartbeat)
STALE_S = 30.0  # a heartbeat older than this: the writer is gone (for a job on another host)


def writer_file(home: Path, host: str | None = None) -> Path:
    """Who the shared writer of `home` on `host` (default: this one) is (pid, host, start time,
    heartbeat), while it runs."""
    return Path(home) / "tracking" / f"writer-{host or socket.gethostname()}.json"


def stop_file(home: Path) -> Path:
    """Made at the end of its jobs: the writer ends once every journal it follows is done."""
    return Path(home) / "tracking" / f"writer-{socket.gethostname()}.stop"


def follow_dir(home: Path, host: str | None = None) -> Path:
    """Where jobs register the journals the shared writer of `home` on `host` (default: this
    one) is to follow."""
    return Path(home) / "tracking" / f"follow-{host or socket.gethostname()}"


def writer_id(me: dict) -> str:
    """How a journal's header names the process that writes it."""
    return f"{me['pid']}@{me['host']}:{me['started']}"


def _parsed(ident: str) -> dict:
    pid, _, rest = ident.partition("@")
    host, _, started = rest.rpartition(":")
    return {"pid": int(pid), "host": host, "started": float(started)}


def alive(ident: str, home: Path | None = None) -> bool:
    """Whether shared writer `ident` runs: on this host by its pid; on another, by a fresh
    heartbeat in its file under `home` (without `home`: cannot tell, so not). A file that
    cannot be read just now (NFS: a stale handle after the writer replaced it) is no verdict:
    a job would otherwise start a writer of its own beside a live one."""
    try:
        me = _parsed(ident)
    except ValueError:
        return False
    here = is_alive(**me)
    if here is not None or home is None:
        return bool(here)
    try:
        found = json.loads(writer_file(home, me["host"]).read_text())
        return writer_id(found) == ident and time.time() - float(found["beat"]) < STALE_S
    except FileNotFoundError:  # it removes its file as it ends
        return False
    except (OSError, ValueError):  # a shared filesystem's passing error: the next look tells
        return True
    except (KeyError, TypeError):  # not a heartbeat's file
        return False


@dataclass(frozen=True)
class WriterRef:
    """A live shared writer as a job sees it: where it is, who it is, whether jobs wait."""

    home: Path
    ident: str
    jobs_wait: bool = False

    @property
    def pid(self) -> int:
        return int(_parsed(self.ident)["pid"])

    @property
    def host(self) -> str:
        return str(_parsed(self.ident)["host"])

    @property
    def elsewhere(self) -> bool:
        """Whether it runs on another host (a SLURM sweep's, seen from a node)."""
        return self.host != socket.gethostname()

    def alive(self) -> bool:
        return alive(self.ident, self.home)

    def register(self, journal: Path) -> None:
        """Ask the writer to follow `journal` (whose header names it): one small file each."""
        path = str(Path(journal).resolve())
        name = hashlib.sha1(path.encode()).hexdigest()[:20]
        write_text_atomic(follow_dir(self.home, self.host) / name, path)


def live_writer(path: str | None) -> WriterRef | None:
    """The live shared writer that the file at `path` (SPOREFLOW_TRACKING_WRITER) names, on this
    host or another (`alive`), or None."""
    if not path:
        return None
    try:
        me = json.loads(Path(path).read_text())
        ident = writer_id(me)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    home = Path(path).resolve().parent.parent
    return WriterRef(home, ident, bool(me.get("jobs_wait"))) if alive(ident, home) else None


def registered(home: Path, seen: set[str] | None = None) -> list[Path]:
    """The journals jobs registered with this host's shared writer of `home`, by name; with
    `seen`, only registrations not in it (their names are added: each is read once)."""
    found = []
    for entry in sorted(follow_dir(home).glob("*")):
        if seen is not None and entry.name in seen or entry.name.startswith("."):
            continue  # read before, or a temporary file of write_text_atomic
        try:
            found.append(Path(entry.read_text()))
        except OSError:
            continue
        if seen is not None:
            seen.add(entry.name)
    return found


def followed(home: Path, ident: str) -> list[Path]:
    """The registered journals whose header names writer `ident`."""
    found = []
    for journal in registered(home):
        try:
            if header_of(journal).get("writer") == ident:
                found.append(journal)
        except (OSError, ValueError):
            continue
    return found


class SharedWriter:
    """The starting process's handle on a shared writer: started once, waited for before a
    sweep's summary reads the store (`flush`), and stopped at the end of its jobs (`stop`)."""

    def __init__(self, home: Path, drain_timeout: float, jobs_wait: bool = False):
        self.home = Path(home)
        self.drain_timeout = drain_timeout
        self.jobs_wait = jobs_wait
        self.ident: str | None = None
        self._proc: subprocess.Popen | None = None

    def start(self) -> bool:
        """Start the writer and wait until it has said who it is (True), or give up."""
        folder = self.home / "tracking"
        folder.mkdir(parents=True, exist_ok=True)
        stop_file(self.home).unlink(missing_ok=True)
        log_file = folder / f"writer-{socket.gethostname()}.log"
        command = [sys.executable, "-m", "sporeflow.tracking.sweep_writer", str(self.home)]
        with open(log_file, "a") as log_out:  # the child keeps its copy
            self._proc = subprocess.Popen(
                command + (["--jobs-wait"] if self.jobs_wait else []),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log_out,
                close_fds=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self._proc.poll() is None:
            ref = live_writer(str(writer_file(self.home)))
            if ref is not None:
                self.ident = ref.ident
                return True
            time.sleep(0.05)
        log.warning(
            "the shared tracking writer did not start (%s): each job starts its own", log_file
        )
        self.stop()
        return False

    def _journals(self) -> list[Path]:
        return followed(self.home, self.ident) if self.ident else []

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

    def gone(self) -> bool:
        """Whether the writer it started has ended (reaped here: a killed writer must not stay
        a zombie that its jobs in this process take for alive)."""
        return self._proc is not None and self._proc.poll() is not None

    def stop(self, patient: bool = True) -> int:
        """Ask the writer to end once every journal it follows is done, wait for it while it
        gets on (not `patient`: SIGTERM at once, it stops after the write in progress), and
        return the records left (kept in the journals for `sporeflow sync`)."""
        if self._proc is None:
            return 0
        stop_file(self.home).touch()
        journals = self._journals()
        drain(self._proc, lambda: self._applied(journals), self.drain_timeout if patient else 0)
        self._proc = None
        stop_file(self.home).unlink(missing_ok=True)
        return self.left()
