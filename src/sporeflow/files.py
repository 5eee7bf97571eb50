"""The one way sporeflow writes a file that another process or a later run may read.

Every write goes to a temp file beside the target (same directory, so the same file system)
and is renamed over it with `os.replace`: a kill or a full disk mid-write never leaves a
truncated file under the real name, and the temp file is removed when the write fails. The
temp name keeps the target's suffix, because MindSpore appends ".ckpt" and numpy ".npy" to
names that lack them.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temp path to write; on success it replaces `path`, on failure it is deleted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())
