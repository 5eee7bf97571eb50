"""One exclusive file lock: how concurrent processes (a joblib/submitit sweep's jobs, the
first runs against a fresh store) take turns at something only one of them should do."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


class HeldLock:
    """An flock this process holds (`exclusive` yields it): released when the block ends, or
    later by a thread it was handed to (`hand_off`), so the holder goes on working while the
    lock still waits for something the next holder needs."""

    def __init__(self, handle: IO[str]) -> None:
        self._handle = handle
        self._guard = threading.Lock()  # the block's end and a handed-off thread both release
        self.handed_off: threading.Thread | None = None

    def release(self) -> None:
        with self._guard:
            if not self._handle.closed:
                fcntl.flock(self._handle, fcntl.LOCK_UN)
                self._handle.close()

    def hand_off(self, until: Callable[[], object]) -> threading.Thread:
        """Keep the lock after the block: a daemon thread runs `until()`, then releases it (the
        kernel releases it if the process ends first). `until` runs beside the holder, so it
        should wait, not compute (the interpreter lock is shared)."""

        def release_after() -> None:
            try:
                until()
            finally:
                self.release()

        thread = threading.Thread(target=release_after, name="lock-hand-off", daemon=True)
        thread.start()  # if this raises, nothing holds it yet: the block's end releases it
        self.handed_off = thread
        return thread


@contextmanager
def exclusive(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[HeldLock]:
    """Hold an flock on `path` (created with its folder); `on_wait()` runs once if another
    process (or another open of the file in this one) holds it, before blocking. Released when
    the block ends unless the block handed it off (`HeldLock.hand_off`). The kernel releases it
    if the holder dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = open(path, "a")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(handle, fcntl.LOCK_EX)
    except BaseException:
        handle.close()
        raise
    lock = HeldLock(handle)
    try:
        yield lock
    finally:
        if lock.handed_off is None:
            lock.release()
