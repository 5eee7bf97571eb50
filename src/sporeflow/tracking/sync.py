"""`sporeflow sync <run dir | sweep dir>`: send what journals still hold, idempotently.

Each journal under the dir is applied by this process unless its writer (its own, or its
sweep's) is alive (then it is left to it). A journal whose owner is gone and that left runs
open ends them KILLED, unless the owner closed it (as a job stopped for a SLURM requeue does:
its runs go on in the requeued job). Running it twice sends nothing the second time.

A record that names a run another journal creates (a sweep's job names its parent) waits
until that journal is applied: `sync` goes over the journals again while a pass sends
something, so one call applies a sweep dir whatever the order of its journals' times.
A sweep's end (entry.sweep_run) applies its dir the same way (`sync_until`) when its writer
died or stopped getting on, with `owners_done`: the jobs have returned, so a journal whose
owner process is alive (the sweep's own, a job run in it) is applied once it is closed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sporeflow.core.processes import is_alive
from sporeflow.tracking.apply import Applier, NotYet
from sporeflow.tracking.journal import NoHeader, journals_under, read_records, sibling
from sporeflow.tracking.shared_writer import alive as shared_alive
from sporeflow.tracking.store import StoreError
from sporeflow.tracking.writer import gone_reason, owner_alive


@dataclass
class Synced:
    journal: Path
    sent: int = 0
    left: int = 0
    ended: tuple[str, ...] = ()
    busy: bool = False  # its own writer (or owner) is alive: left alone
    error: str = ""
    waits: bool = False  # it names a run another journal under the same root creates
    no_header: str = ""  # what its line 1 is instead of the header: none of it can be sent


WRITERS = ("sporeflow.tracking.writer", "sporeflow.tracking.sweep_writer")  # their -m names


def writer_alive(journal: Path) -> bool:
    """Whether the writer that follows `journal` (its own, or its sweep's) is running."""
    try:
        pid = int(sibling(journal, ".writer.pid").read_text())
    except (OSError, ValueError):
        return False
    import psutil

    try:
        process = psutil.Process(pid)
        return process.is_running() and any(w in process.cmdline() for w in WRITERS)
    except psutil.Error:
        return False


def sync_journal(journal: Path, owners_done: bool = False) -> Synced:
    """Apply one journal unless a writer or its owner is on it (the module docstring). One
    whose line 1 is not its header is left as it is, its records counted as left: the header
    names their store and owner (the other journals are applied all the same)."""
    try:
        applier = Applier(journal)
    except NoHeader as ex:
        return Synced(journal, left=lines_after_header(journal), no_header=ex.why)
    result = Synced(journal)
    followed = writer_alive(journal) or shared_alive(applier.header.get("writer", "own"))
    writing = owner_alive(applier.header) and not (owners_done and applier.owner_closed())
    if followed or (writing and applier.pending()):
        result.busy, result.left = True, len(applier.pending())
        return result
    before = applier.state.seq
    try:
        applier.apply_pending()
        gone = is_alive(**_owner(applier.header)) is False  # None: another host, cannot tell
        if gone and not applier.owner_closed():
            result.ended = tuple(applier.end_open("KILLED", gone_reason(applier.header)))
    except StoreError as ex:
        result.error, result.waits = str(ex), isinstance(ex, NotYet)
    # records, not seqs: a line set aside (journal.parse_line) may have been one
    result.sent = sum(r["seq"] <= applier.state.seq for r in read_records(journal, before))
    result.left = len(applier.pending())
    return result


def lines_after_header(journal: Path) -> int:
    """The whole, non-empty lines after line 1: the records of a journal whose header cannot
    be read (counted, not parsed: a line is set aside only when its journal is applied)."""
    with open(journal, "rb") as f:
        f.readline()
        return sum(1 for line in f if line.endswith(b"\n") and line.strip())


def _owner(header: dict) -> dict:
    owner = header["owner"]
    return {"pid": owner["pid"], "host": owner["host"], "started": owner["started"]}


def wait_for_writers(root: Path, timeout: float) -> bool:
    """Wait until no writer of a journal under `root` is alive (True), or `timeout` s."""
    deadline = time.monotonic() + timeout
    while any(writer_alive(j) for j in journals_under(root)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def sync(root: Path, owners_done: bool = False) -> list[Synced]:
    """Apply every journal under `root`; those waiting for a run another one creates again
    while a pass sends something (see the module docstring). One result per journal."""
    done = {j: sync_journal(j, owners_done) for j in journals_under(root)}
    while any(r.waits for r in done.values()):
        again = {j: sync_journal(j, owners_done) for j, r in done.items() if r.waits}
        moved = any(r.sent for r in again.values())
        for journal, result in again.items():
            result.sent += done[journal].sent
            done[journal] = result
        if not moved:
            break
    return list(done.values())


def sync_until(
    root: Path,
    timeout: float,
    owners_done: bool = True,
    counts: Callable[[Path], bool] = lambda journal: True,
) -> list[Synced]:
    """`sync` again each second while records are left in journals that `counts` (a writer
    still on them, a store busy or down), for up to `timeout` s; the last pass's results for
    those journals."""
    deadline = time.monotonic() + timeout
    while True:
        done = [r for r in sync(root, owners_done) if counts(r.journal)]
        if not any(r.left for r in done) or time.monotonic() > deadline:
            return done
        time.sleep(1.0)
