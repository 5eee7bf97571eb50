"""`sporeflow sync <run dir | sweep dir>`: send what journals still hold, idempotently.

Each journal under the dir is applied by this process unless its writer (its own, or its
sweep's) is alive (then it is left to it). A journal whose owner is gone and that left runs
open ends them KILLED, unless the owner closed it (as a job stopped for a SLURM requeue does:
its runs go on in the requeued job). Running it twice sends nothing the second time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sporeflow.core.processes import is_alive
from sporeflow.tracking.apply import Applier
from sporeflow.tracking.journal import journals_under, sibling
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


def sync_journal(journal: Path) -> Synced:
    applier = Applier(journal)
    result = Synced(journal)
    followed = writer_alive(journal) or shared_alive(applier.header.get("writer", "own"))
    if followed or (owner_alive(applier.header) and applier.pending()):
        result.busy, result.left = True, len(applier.pending())
        return result
    before = applier.state.seq
    try:
        applier.apply_pending()
        gone = is_alive(**_owner(applier.header)) is False  # None: another host, cannot tell
        if gone and not applier.owner_closed():
            result.ended = tuple(applier.end_open("KILLED", gone_reason(applier.header)))
    except StoreError as ex:
        result.error = str(ex)
    result.sent = applier.state.seq - before
    result.left = len(applier.pending())
    return result


def _owner(header: dict) -> dict:
    owner = header["owner"]
    return {"pid": owner["pid"], "host": owner["host"], "started": owner["started"]}


def wait_for_writers(root: Path, timeout: float) -> bool:
    """Wait until no writer of a journal under `root` is alive (True), or `timeout` s."""
    import time

    deadline = time.monotonic() + timeout
    while any(writer_alive(j) for j in journals_under(root)):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def sync(root: Path) -> list[Synced]:
    """Apply every journal under `root` (see the module docstring)."""
    return [sync_journal(j) for j in journals_under(root)]
