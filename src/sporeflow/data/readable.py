"""Every file a job reads from an image folder, judged before any work (issues 60 and 75).

MindSpore's decoder kills the process on some damaged files (SIGFPE on a truncated JPEG) and
fails mid-epoch on others, so each file is judged once by the one rule of what is an image
(`image_files.inspect_image`: Pillow decodes it whole): an image (its format), a file left out,
or a damaged one, refused with one line naming it. The verdict is remembered in a record under
the user's cache folder, keyed on what a user cannot put back: the file's inode, size,
modification time AND change time (st_ctime_ns, which `touch -d` and `os.utime` set to now), so
a file rewritten in place with its size and mtime restored is judged again, and no unchecked
file reaches the decoder. The next job over the same folder decodes only what changed
(figures: BENCHMARKS.md, "Image checks"). A cache folder that cannot be written, or a record
that cannot be saved (a full disk), turns the record off for the run in one warning line: every
image is judged, none remembered (issue 77).
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from sporeflow.data.image_files import inspect_image
from sporeflow.storage.cache import usable_cache_dir
from sporeflow.storage.files import DiskFullError, write_text_atomic

log = logging.getLogger(__name__)
SAY_AT = 2000  # files to check before a line says the job is checking them
OFF = "every image is judged again by each job"  # what a job does without the record
Verdict = tuple[str, int] | None  # (format, shorter side) of an image; None: left out


def checked_files(folder: Path, files: Sequence[Path]) -> list[Verdict]:
    """Each of `folder`'s `files` judged (`inspect_image`), those unchanged since a job judged
    them by the record; DataError naming the first damaged one (the others judged so far are
    remembered all the same)."""
    record = _record_path(folder)
    known = _read(record) if record is not None else {}
    stamps = {str(f): _stamp(f) for f in files}
    verdicts = {
        name: _verdict(entry[len(stamp) :])
        for name, stamp in stamps.items()
        if isinstance(entry := known.get(name), list) and entry[: len(stamp)] == stamp
    }
    todo = [f for f in files if str(f) not in verdicts]
    if len(todo) >= SAY_AT:
        log.info("checking %d images of %s before training (once)", len(todo), folder)
    try:
        for file in todo:
            verdicts[str(file)] = inspect_image(file)
    finally:
        kept = {n: [*stamps[n], *_entry(v)] for n, v in verdicts.items()}
        if record is not None and kept != known:  # judged so far, even when one is damaged
            _keep(record, kept)
    return [verdicts[str(f)] for f in files]


def _keep(record: Path, kept: dict[str, list]) -> None:
    """The record saved; a disk that cannot take it costs the next job the checks, said once."""
    try:
        write_text_atomic(record, json.dumps(kept))
    except (OSError, DiskFullError) as ex:
        log.warning("image checks: cannot save %s (%s): %s", record, ex, OFF)


def _stamp(file: Path) -> list[int]:
    """What a file's bytes are known by: a rewrite changes the change time whatever else the
    writer puts back."""
    stat = file.stat()
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def _entry(verdict: Verdict) -> list:
    return [None, 0] if verdict is None else [verdict[0], verdict[1]]


def _verdict(entry: list) -> Verdict:
    if len(entry) != 2 or entry[0] is None:
        return None
    return str(entry[0]), int(entry[1])


def _record_path(folder: Path) -> Path | None:
    """The folder's record in the user cache; None when the cache cannot be written (said)."""
    cache = usable_cache_dir("image-checks", off=OFF)
    if cache is None:
        return None
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    return cache / f"{digest}.json"


def _read(record: Path) -> dict[str, list]:
    """The record, or nothing when it is missing or unreadable (a file then is checked again)."""
    try:
        found = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
