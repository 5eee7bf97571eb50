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
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sporeflow.core.errors import SporeflowError


class DiskFullError(SporeflowError):
    """The device ran out of space mid-write; the message names the file and the free space."""


def no_space(ex: BaseException) -> bool:
    """Whether `ex` says the device is full (an OSError's errno, or a library's message)."""
    return getattr(ex, "errno", None) == errno.ENOSPC or "No space left on device" in str(ex)


def disk_full(path: str | os.PathLike, size_hint: int | None = None) -> DiskFullError:
    """The one line a full device gives, naming the file that could not be written, the free
    space and (given `size_hint`, bytes) about how much it needs."""
    path = Path(path)
    free = shutil.disk_usage(_existing(path.parent)).free / 2**20
    need = f", about {size_hint / 2**20:.1f} MB needed" if size_hint else ""
    return DiskFullError(
        f"no space left writing {path}: {free:.1f} MB free on its device{need}; files "
        "written before are intact. Free space there, or give hydra.run.dir on a larger disk"
    )


def _existing(path: Path) -> Path:
    """`path`, or its nearest folder that exists (what a check of a folder not made yet reads)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | os.PathLike) -> int:
    """Free bytes on the device that holds `path` (or would: its nearest existing folder)."""
    return shutil.disk_usage(_existing(Path(path).absolute())).free


def unwritable(path: str | os.PathLike) -> str | None:
    """Why this process cannot write the file or folder `path` (the system's words: "Read-only
    file system", "Permission denied"), None when it can. Tried, never read from the modes: root
    ignores a file's modes, and a read-only mount refuses root too. A file is opened for writing
    and left unchanged, and its folder, where a writer keeps its temp and journal files (sqlite's
    rollback journal), is tried too; a folder (or, not made yet, its nearest existing parent)
    gets a temp file that is gone at once."""
    path = Path(path).absolute()
    try:
        if path.is_file():
            open(path, "r+b").close()  # opened to be refused, never written
            path = path.parent
        with tempfile.TemporaryFile(dir=_existing(path)):
            pass
    except OSError as ex:
        return ex.strerror or str(ex)
    return None


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
        if not no_space(ex):
            raise
        tmp.unlink(missing_ok=True)
        raise disk_full(path, size_hint) from None
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
