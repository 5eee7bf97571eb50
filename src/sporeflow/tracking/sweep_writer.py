"""A shared tracking writer on this machine: a sweep's, or one for any caller's many short jobs
(tracking.shared_writer says why and how jobs find it):

    python -m sporeflow.tracking.sweep_writer <home> [--jobs-wait]

It says who it is in `<home>/tracking/writer-<host>.json` (with `jobs_wait`: each job waits at
its end until the store has its records), rewritten every HEARTBEAT_S seconds with the time (a
job on another host knows it alive by that), then follows every journal registered in
`<home>/tracking/follow-<host>/` whose header names it, each with writer.Follower's rules (in
order, exactly once through its own `applied.json`, runs of a dead owner ended KILLED; a
journal of another host's process is followed until the writer ends, whose sweep ends the runs
of the jobs its scheduler ended), one store per (URI, experiment, artifact root) and one
system-metrics sampler per tracking URI (for this host's jobs). It ends once
`writer-<host>.stop` exists (or the process that started it is gone) and every journal it
follows is done; on SIGTERM after the write in progress. Its log: `writer-<host>.log` beside
those files; nice 10, Ctrl-C ignored, as tracking.writer.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
import time
from pathlib import Path

from sporeflow.core.processes import is_alive, this_process
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.journal import header_of, sibling
from sporeflow.tracking.shared_writer import (
    HEARTBEAT_S,
    registered,
    stop_file,
    writer_file,
    writer_id,
)
from sporeflow.tracking.store import Store
from sporeflow.tracking.system_metrics import SystemMetrics
from sporeflow.tracking.writer import (
    Follower,
    Idle,
    StopRequest,
    become_writer,
    owned_here,
)

log = logging.getLogger("sporeflow.tracking.sweep_writer")


class SweepWriter:
    """Every registered journal that names this writer, followed until its jobs end."""

    def __init__(self, home: Path, ident: str, starter: dict):
        self.home, self.ident, self.starter = Path(home), ident, starter
        self.followers: dict[Path, Follower] = {}
        self._seen: set[str] = set()  # registrations read (each is read once)
        self._stores: dict[tuple, Store] = {}
        self._monitors: dict[str, SystemMetrics] = {}

    def _discover(self) -> None:
        for journal in registered(self.home, self._seen):
            try:
                header = header_of(journal)
            except (OSError, ValueError):  # gone, or not a journal
                log.warning("%s is registered but not a journal it can read", journal)
                continue
            if header.get("writer") != self.ident or journal in self.followers:
                continue
            write_text_atomic(sibling(journal, ".writer.pid"), str(os.getpid()))
            # a machine's figures are sampled on it: none for another host's job
            sampler = self._sampler(header) if owned_here(header) else None
            self.followers[journal] = Follower(journal, self._store(header), sampler)
            log.info("following %s", journal)

    def _store(self, header: dict) -> Store:
        key = (header["uri"], header["experiment"], header.get("artifact_root"))
        if key not in self._stores:
            self._stores[key] = Store(*key)
        return self._stores[key]

    def _sampler(self, header: dict) -> SystemMetrics:
        return self._monitors.setdefault(header["uri"], SystemMetrics(header["uri"]))

    def _ending(self) -> bool:
        return stop_file(self.home).exists() or not is_alive(**self.starter)

    def run(self, stop: type[StopRequest] = StopRequest) -> int:
        """Follow until the sweep ends (module docstring); 0 when the store has every record,
        3 when some are left in their journals."""
        idle = Idle()
        try:
            while not stop.requested:
                ending = self._ending()  # before the last look: a journal made after is seen
                self._discover()
                if ending:  # other hosts' jobs ended (or are on their own now): let them go
                    for follower in self.followers.values():
                        follower.let_go()
                applied = sum(f.step() for f in self.followers.values())
                if ending and all(f.code is not None for f in self.followers.values()):
                    break
                idle.pause(applied)
        finally:
            for sampler in self._monitors.values():
                sampler.stop_all()
        return 3 if any(f.left() for f in self.followers.values()) else 0


class Heartbeat(threading.Thread):
    """Rewrites the writer's file with the time every HEARTBEAT_S seconds, from a thread of its
    own: a store call that hangs must not make jobs on other hosts take the writer for gone
    (they would start their own and two would apply one journal)."""

    def __init__(self, path: Path, me: dict):
        super().__init__(name="heartbeat", daemon=True)
        self.path, self.me = path, me
        self.stopped = threading.Event()
        self.beat()

    def beat(self) -> None:
        write_text_atomic(self.path, json.dumps({**self.me, "beat": time.time()}))

    def run(self) -> None:
        while not self.stopped.wait(HEARTBEAT_S):
            try:
                self.beat()
            except OSError as ex:  # a full or unmounted disk: the next beat tries again
                log.warning("heartbeat not written: %s", ex)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    jobs_wait = "--jobs-wait" in args
    args = [a for a in args if a != "--jobs-wait"]
    if len(args) != 1:
        print(
            "usage: python -m sporeflow.tracking.sweep_writer <home> [--jobs-wait]", file=sys.stderr
        )
        return 2
    home = Path(args[0])
    become_writer(writer_file(home).with_suffix(".log"))
    import psutil

    parent = psutil.Process(os.getppid())
    starter = {"pid": parent.pid, "host": this_process()["host"], "started": parent.create_time()}
    me = this_process()
    heartbeat = Heartbeat(writer_file(home), {**me, "jobs_wait": jobs_wait})
    heartbeat.start()
    log.info("shared writer started for %s", home)
    try:
        code = SweepWriter(home, writer_id(me), starter).run()
    except Exception:
        log.exception("writer failed; the journals keep what is not applied (sporeflow sync)")
        code = 1
    finally:
        heartbeat.stopped.set()
        heartbeat.join()
        writer_file(home).unlink(missing_ok=True)
    log.info("shared writer ends (%d)", code)
    return code


if __name__ == "__main__":
    exit_code = main()
    logging.shutdown()
    os._exit(exit_code)  # everything is applied: skip tearing down MLflow's module graph
