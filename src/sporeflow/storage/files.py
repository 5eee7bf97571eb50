"""The one way sporeflow writes a file that another process or a later run may read.

Every write goes to a temp file beside the target (same directory, so the same file system)
and is renamed over it with `os.replace`: a kill or a full disk mid-write never leaves a
truncated file under the real name, and the temp file is removed when the write fails. The
temp name keeps the target's suffix, because MindSpore appends ".ckpt" and numpy ".npy" to
names that lack them.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sporeflow.core.errors import SporeflowError


class DiskFullError(SporeflowError):
    """The device ran out of space mid-write; the message names the file and the free space."""


def _no_space(ex: BaseException) -> bool:
    return getattr(ex, "errno", None) == errno.ENOSPC or "No space left on device" in str(ex)


@contextmanager
def atomic_path(path: str | os.PathLike, size_hint: int | None = None) -> Iterator[Path]:
    """Yield a temp path to write; on success it replaces `path`, on failure it is deleted.
    A full device becomes one DiskFullError naming `path`, the free space and (given
    `size_hint`, bytes) about how much the file needs."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except Exception as ex:
        if not _no_space(ex):
            raise
        tmp.unlink(missing_ok=True)
        free = shutil.disk_usage(path.parent).free / 2**20
        need = f", about {size_hint / 2**20:.1f} MB needed" if size_hint else ""
        raise DiskFullError(
            f"no space left writing {path}: {free:.1f} MB free on its device{need}; files "
            "written before are intact. Free space there, or give hydra.run.dir on a larger disk"
        ) from None
    finally:
        tmp.unlink(missing_ok=True)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> Path:
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    return write_bytes_atomic(path, text.encode())


CHUNK = 1 << 20


def sha256_file(path: str | os.PathLike) -> str:
    """A file's SHA-256 (hex), read in chunks: what a run records of the files it shares and
    what a machine that fetches them checks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()
