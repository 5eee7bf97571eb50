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
from sporeflow.tracking.store import StoreError
from sporeflow.tracking.system_metrics import SystemMetrics

log = logging.getLogger("sporeflow.tracking.writer")

IDLE_S = 0.2  # how often an idle writer looks at the journal
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # waits between tries of an unreachable store


class _Stop:
    requested = False


def owner_alive(header: dict) -> bool:
    owner = header["owner"]
    return bool(is_alive(owner["pid"], owner["host"], owner["started"]))


def gone_reason(header: dict) -> str:
    owner = header["owner"]
    return (
        f"process {owner['pid']} on {owner['host']} ended without ending this run; closed by its "
        f"tracking writer (pid {os.getpid()} on {socket.gethostname()}) at {time.strftime('%Y-%m-%d %H:%M:%S')}"
    )


def follow(journal: Path, stop: type[_Stop] = _Stop) -> int:
    """Apply the journal until its owner is done (see the module docstring); 0 when the store
    has everything, 3 when records are left in the journal."""
    header = header_of(journal)
    monitors = SystemMetrics(header["uri"])
    try:
        return _follow(journal, header, Applier(journal, monitors=monitors), stop)
    finally:
        monitors.stop_all()


def _follow(journal: Path, header: dict, applier: Applier, stop: type[_Stop]) -> int:
    failures, owner_gone_at = 0, None
    while not stop.requested:
        alive = owner_alive(header)
        if not alive and owner_gone_at is None:
            owner_gone_at = time.monotonic()
            log.info("owner process gone: draining the journal")
        try:
            applied = applier.apply_pending()
            if failures:
                log.info("store reachable again after %d failed tries", failures)
                sibling(journal, PROBLEM).unlink(missing_ok=True)
            failures = 0
            if applier.closed and not applier.pending():
                return 0
            if not alive and not applier.pending():
                ended = applier.end_open("KILLED", gone_reason(header))
                if ended:
                    log.warning("ended runs %s KILLED: their process is gone", ", ".join(ended))
                return 0
            if not applied:
                time.sleep(IDLE_S)
        except StoreError as ex:
            failures += 1
            if failures == 1:  # the trainer says it on its console (Tracker.say_problem)
                write_text_atomic(sibling(journal, PROBLEM), str(ex))
            pause = BACKOFF_S[min(failures, len(BACKOFF_S)) - 1]
            log.warning("try %d failed (%s); next in %.1f s", failures, ex, pause)
            if owner_gone_at is not None and time.monotonic() - owner_gone_at > header.get(
                "drain_timeout", 30
            ):
                log.error(
                    "owner gone and the store out of reach: %d records left in %s",
                    len(applier.pending()),
                    journal,
                )
                return 3
            _sleep(pause, stop)
    return 0 if not applier.pending() else 3


def _sleep(seconds: float, stop: type[_Stop]) -> None:
    end = time.monotonic() + seconds
    while not stop.requested and time.monotonic() < end:
        time.sleep(min(IDLE_S, end - time.monotonic()))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m sporeflow.tracking.writer <journal>", file=sys.stderr)
        return 2
    journal = Path(args[0])
    telemetry.off_unless_chosen()  # started by hand (sporeflow sync), not by a trainer
    logging.basicConfig(
        filename=sibling(journal, ".writer.log"),
        level=logging.INFO,
        format="%(asctime)s %(process)d %(levelname)s %(message)s",
    )
    os.nice(10)  # the trainer comes first for the CPU: records only wait in the journal
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: setattr(_Stop, "requested", True))
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
