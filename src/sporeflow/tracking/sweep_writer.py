"""The sweep's one tracking writer on this machine (tracking.shared_writer says why and how
jobs find it):

    python -m sporeflow.tracking.sweep_writer <sweep dir>

It says who it is in `<sweep dir>/tracking/writer-<host>.json`, then follows every journal
under the sweep dir whose header names it, each with writer.Follower's rules (in order, exactly
once through its own `applied.json`, runs of a dead owner ended KILLED), one store and one
system-metrics sampler per tracking URI. It ends once `writer-<host>.stop` exists (or the
process that started it is gone) and every journal it follows is done; on SIGTERM after the
write in progress. Its log: `writer-<host>.log` beside those files; nice 10, Ctrl-C ignored,
as tracking.writer.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from sporeflow.core.processes import is_alive, this_process
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.journal import header_of, sibling
from sporeflow.tracking.shared_writer import journal_candidates, stop_file, writer_file, writer_id
from sporeflow.tracking.store import Store
from sporeflow.tracking.system_metrics import SystemMetrics
from sporeflow.tracking.writer import (
    IDLE_S,
    Follower,
    StopRequest,
    become_writer,
    one_argument,
)

log = logging.getLogger("sporeflow.tracking.sweep_writer")


class SweepWriter:
    """Every journal of a sweep dir that names this writer, followed until the sweep ends."""

    def __init__(self, sweep_dir: Path, ident: str, starter: dict):
        self.sweep_dir, self.ident, self.starter = Path(sweep_dir), ident, starter
        self.followers: dict[Path, Follower] = {}
        self._others: set[Path] = set()  # journals another writer follows
        self._stores: dict[tuple, Store] = {}
        self._monitors: dict[str, SystemMetrics] = {}

    def _discover(self) -> None:
        for journal in journal_candidates(self.sweep_dir):
            if journal in self.followers or journal in self._others:
                continue
            try:
                header = header_of(journal)
            except (OSError, ValueError):  # its header line is being written
                continue
            if header.get("writer") != self.ident:
                self._others.add(journal)
                continue
            write_text_atomic(sibling(journal, ".writer.pid"), str(os.getpid()))
            self.followers[journal] = Follower(journal, self._store(header), self._sampler(header))
            log.info("following %s", journal)

    def _store(self, header: dict) -> Store:
        key = (header["uri"], header["experiment"], header.get("artifact_root"))
        if key not in self._stores:
            self._stores[key] = Store(*key)
        return self._stores[key]

    def _sampler(self, header: dict) -> SystemMetrics:
        return self._monitors.setdefault(header["uri"], SystemMetrics(header["uri"]))

    def _ending(self) -> bool:
        return stop_file(self.sweep_dir).exists() or not is_alive(**self.starter)

    def run(self, stop: type[StopRequest] = StopRequest) -> int:
        """Follow until the sweep ends (module docstring); 0 when the store has every record,
        3 when some are left in their journals."""
        try:
            while not stop.requested:
                ending = self._ending()  # before the last look: a journal made after is seen
                self._discover()
                applied = sum(f.step() for f in self.followers.values())
                if ending and all(f.code is not None for f in self.followers.values()):
                    break
                if not applied:
                    time.sleep(IDLE_S)
        finally:
            for sampler in self._monitors.values():
                sampler.stop_all()
        return 3 if any(f.left() for f in self.followers.values()) else 0


def main(argv: list[str] | None = None) -> int:
    sweep_dir = one_argument(argv, "python -m sporeflow.tracking.sweep_writer <sweep dir>")
    if sweep_dir is None:
        return 2
    become_writer(writer_file(sweep_dir).with_suffix(".log"))
    import psutil

    parent = psutil.Process(os.getppid())
    starter = {"pid": parent.pid, "host": this_process()["host"], "started": parent.create_time()}
    me = this_process()
    write_text_atomic(writer_file(sweep_dir), json.dumps(me))
    log.info("sweep writer started for %s", sweep_dir)
    try:
        code = SweepWriter(sweep_dir, writer_id(me), starter).run()
    except Exception:
        log.exception("writer failed; the journals keep what is not applied (sporeflow sync)")
        code = 1
    finally:
        writer_file(sweep_dir).unlink(missing_ok=True)
    log.info("sweep writer ends (%d)", code)
    return code


if __name__ == "__main__":
    exit_code = main()
    logging.shutdown()
    os._exit(exit_code)  # everything is applied: skip tearing down MLflow's module graph
