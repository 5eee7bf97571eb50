"""The journal's writer: a child process of the run that applies the journal to the store.

    python -m sporeflow.tracking.writer <journal>

It imports MLflow so that the training process does not. It follows the journal as it grows
and applies it in order (tracking.apply). While the store is busy or down it retries with
back-off for as long as its owner (the process that writes the journal, named in the header)
lives. It ends when
- the owner's "close" record is applied and nothing is left (a normal end);
- the owner is gone: it applies what was journalled, ends the runs the owner left open KILLED,
  and, if the store stays out of reach, gives up after the header's `drain_timeout` seconds
  (the journal keeps the rest for `sporeflow sync`);
- SIGTERM: it stops after the write in progress.
Ctrl-C (SIGINT to the whole foreground group) is ignored: the owner decides when to stop.
It runs at nice 10: on a busy machine the training process gets the CPU first.
Its log is `<stem>.writer.log` beside the journal; its pid `<stem>.writer.pid`; while the store
cannot be reached, `<stem>.writer.problem` says why (the trainer prints it once).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

from sporeflow.core import telemetry
from sporeflow.core.processes import is_alive
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.apply import Applier
from sporeflow.tracking.journal import PROBLEM, header_of, sibling
from sporeflow.tracking.store import Store, StoreError
from sporeflow.tracking.system_metrics import SystemMetrics

log = logging.getLogger("sporeflow.tracking.writer")

IDLE_S = 0.2  # how often an idle writer looks at the journal
BUSY_S, BURST_S = 0.02, 2.0  # how often it looks for this long after it applied something
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # waits between tries of an unreachable store


class Idle:
    """The writer's pause between looks at its journals: short while records keep coming (a
    stage's end writes a burst - metrics, artifacts, the model, the run's end - that the next job
    of a sweep waits for), IDLE_S once none came for BURST_S (a long epoch)."""

    def __init__(self):
        self.last_applied = 0.0

    def pause(self, applied: int) -> None:
        """After a look that applied `applied` records."""
        now = time.monotonic()
        if applied:
            self.last_applied = now
            return
        time.sleep(BUSY_S if now - self.last_applied < BURST_S else IDLE_S)


class StopRequest:
    requested = False


def owner_alive(header: dict) -> bool:
    owner = header["owner"]
    return bool(is_alive(owner["pid"], owner["host"], owner["started"]))


def owned_here(header: dict) -> bool:
    """Whether the journal's owner runs on this host (else its liveness cannot be looked at)."""
    return bool(header["owner"]["host"] == socket.gethostname())


def gone_reason(header: dict) -> str:
    owner = header["owner"]
    return (
        f"process {owner['pid']} on {owner['host']} ended without ending this run; closed by its "
        f"tracking writer (pid {os.getpid()} on {socket.gethostname()}) at {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


class Follower:
    """One journal followed to its end (the module docstring's rules): each `step` applies what
    is pending, unless a failed try asked to wait; `code` is set once the journal is done
    (0: the store has everything, 3: records are left). The sweep's writer holds one per job.
    An owner on another host (a SLURM node's job) cannot be looked at: it counts as alive
    until the sweep's writer ends (`let_go`), and its open runs are not ended here (the sweep
    ends those of jobs the scheduler ended: entry.sweep_summary.end_job_runs)."""

    def __init__(
        self, journal: Path, store: Store | None = None, monitors: SystemMetrics | None = None
    ):
        self.journal = Path(journal)
        self.applier = Applier(self.journal, store, monitors)
        self.header = self.applier.header
        self.code: int | None = None
        self.failures, self.next_try = 0, 0.0
        self.owner_gone_at: float | None = None
        self.remote = not owned_here(self.header)
        self.let_go_of = False  # the writer ends: a remote owner counts as gone from then on

    def let_go(self) -> None:
        """The writer ends: an owner on another host counts as gone from now on."""
        self.let_go_of = self.remote

    def _owner_alive(self) -> bool:
        return not self.let_go_of if self.remote else owner_alive(self.header)

    def step(self) -> int:
        """One try; the records applied (0 while it waits out a failure)."""
        now = time.monotonic()
        if self.code is not None or now < self.next_try:
            return 0
        alive = self._owner_alive()
        if not alive and self.owner_gone_at is None:
            self.owner_gone_at = now
            log.info("%s: owner process gone: draining the journal", self.journal.name)
        try:
            applied = self.applier.apply_pending()
        except StoreError as ex:
            self._failed(ex, now)
            return 0
        if self.failures:
            log.info("store reachable again after %d failed tries", self.failures)
            sibling(self.journal, PROBLEM).unlink(missing_ok=True)
        self.failures = 0
        if self.applier.closed and not self.applier.pending():
            self.code = 0
        elif not alive and not self.applier.pending():
            ended = [] if self.remote else self.applier.end_open("KILLED", gone_reason(self.header))
            if ended:
                log.warning("ended runs %s KILLED: their process is gone", ", ".join(ended))
            self.code = 0
        return applied

    def _failed(self, ex: StoreError, now: float) -> None:
        self.failures += 1
        if self.failures == 1:  # the trainer says it on its console (Tracker.say_problem)
            write_text_atomic(sibling(self.journal, PROBLEM), str(ex))
        pause = BACKOFF_S[min(self.failures, len(BACKOFF_S)) - 1]
        log.warning(
            "%s: try %d failed (%s); next in %.1f s", self.journal.name, self.failures, ex, pause
        )
        gone_for = now - self.owner_gone_at if self.owner_gone_at is not None else 0.0
        if gone_for > self.header.get("drain_timeout", 30):
            log.error(
                "owner gone and the store out of reach: %d records left in %s",
                len(self.applier.pending()),
                self.journal,
            )
            self.code = 3
        self.next_try = now + pause

    def left(self) -> int:
        """The journal's records the store does not have."""
        return len(self.applier.pending())


def follow(journal: Path, stop: type[StopRequest] = StopRequest) -> int:
    """Apply the journal until its owner is done (see the module docstring); 0 when the store
    has everything, 3 when records are left in the journal."""
    monitors = SystemMetrics(header_of(journal)["uri"])
    try:
        follower, idle = Follower(journal, monitors=monitors), Idle()
        while not stop.requested and follower.code is None:
            idle.pause(follower.step())
        if follower.code is not None:
            return follower.code
        return 0 if not follower.left() else 3
    finally:
        monitors.stop_all()


def become_writer(log_file: Path) -> None:
    """What a writer process is (this one and the sweep's): MLflow's telemetry off unless the
    user chose it, a log file of its own, nice 10 (training comes first for the CPU: records
    only wait in their journal), Ctrl-C ignored (its owner decides when to stop), SIGTERM a
    stop after the write in progress; SIGUSR2 ignored (its trainer started it with the signal
    blocked: core.signals.kept_from_children)."""
    telemetry.off_unless_chosen()
    logging.basicConfig(
        filename=log_file,
        level=logging.INFO,
        format="%(asctime)s %(process)d %(levelname)s %(message)s",
    )
    os.nice(10)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)  # SLURM's time-limit warning: the trainer's
    signal.signal(signal.SIGTERM, lambda *_: setattr(StopRequest, "requested", True))


def one_argument(argv: list[str] | None, usage: str) -> Path | None:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print(f"usage: {usage}", file=sys.stderr)
        return None
    return Path(args[0])


def main(argv: list[str] | None = None) -> int:
    journal = one_argument(argv, "python -m sporeflow.tracking.writer <journal>")
    if journal is None:
        return 2
    become_writer(sibling(journal, ".writer.log"))
    write_text_atomic(sibling(journal, ".writer.pid"), str(os.getpid()))
    log.info("writer started for %s", journal)
    try:
        code = follow(journal)
    except Exception:
        log.exception("writer failed; the journal keeps what is not applied (sporeflow sync)")
        return 1
    log.info("writer ends (%d)", code)
    return code


if __name__ == "__main__":
    exit_code = main()
    logging.shutdown()
    # Everything is applied and the log flushed: skip tearing down MLflow's module graph at
    # interpreter exit (1.5 s of garbage collection that the trainer's drain waits on).
    os._exit(exit_code)
