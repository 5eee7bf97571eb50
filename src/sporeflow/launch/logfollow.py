"""The launcher's console: rank 0's log, followed as it grows.

msrun itself would tail every worker's log into the console (each line N times, and `tail -f`
processes that outlive a killed job); the launcher runs msrun with tailing off, its own output
in `msrun_logs/msrun.log`, and shows rank 0's log here instead - progress bar included - minus
MindSpore's C++ INFO/DEBUG chatter (still in the log file)."""

from __future__ import annotations

import codecs
import os
import re
import sys
import threading
import time
from pathlib import Path
from typing import TextIO

CHATTER = re.compile(r"^\[(INFO|DEBUG)\] ")


class LogFollower:
    """Copies what is added to `path` from now on to `out`, from a background thread until
    `stop()` (then drains the rest). msrun appends to a worker's log: a resumed or requeued
    job's console starts with its own lines, not the earlier run's again (a log that is
    started anew, shorter than it was, is shown from its beginning)."""

    def __init__(self, path: Path, out: TextIO = sys.stderr, poll: float = 0.2):
        self.path, self.out, self.poll = Path(path), out, poll
        self._start = self.path.stat().st_size if self.path.is_file() else 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="follow-rank-0", daemon=True)

    def __enter__(self) -> LogFollower:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _emit(self, pending: str) -> str:
        """Write complete lines (minus chatter) and in-place progress updates; return the rest."""
        *lines, rest = pending.split("\n")
        for line in lines:
            if not CHATTER.match(line.lstrip("\r")):
                self.out.write(line + "\n")
        if "\r" in rest:  # a progress bar redrawing itself: show it now
            head, _, rest = rest.rpartition("\r")
            self.out.write(head + "\r")
        self.out.flush()
        return rest

    def _run(self) -> None:
        while not self.path.exists():
            if self._stop.wait(self.poll):
                return
        pending, decode = "", codecs.getincrementaldecoder("utf-8")(errors="replace").decode
        with open(self.path, "rb") as f:
            f.seek(self._start)
            while True:
                stopping = self._stop.is_set()
                if os.fstat(f.fileno()).st_size < f.tell():  # started anew: from its beginning
                    f.seek(0)
                chunk = decode(f.read())
                if chunk:
                    pending = self._emit(pending + chunk)
                elif stopping:
                    if pending:
                        self._emit(pending + "\n")
                    return
                else:
                    time.sleep(self.poll)
