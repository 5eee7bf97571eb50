"""Every image file a job will decode, known readable before any work (issue 60).

MindSpore's decoder kills the process on some damaged files (SIGFPE on a truncated JPEG) and
fails mid-epoch on others, so each file is decoded once by Pillow first
(`image_files.check_image`): a bad one is refused with one line naming it. A file found
readable is remembered by its path, size and modification time in a record under the user's
cache folder, so the next job over the same folder decodes only what changed (figures:
BENCHMARKS.md, "Image checks").
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Sequence
from pathlib import Path

from sporeflow.data.image_files import check_image
from sporeflow.storage.cache import user_cache_dir
from sporeflow.storage.files import write_text_atomic

log = logging.getLogger(__name__)
SAY_AT = 2000  # files to check before a line says the job is checking them


def check_readable(folder: Path, files: Sequence[Path]) -> None:
    """Decode each of `folder`'s `files` not already found readable as it is now; DataError
    naming the first one that is not (the others found readable are remembered all the same)."""
    record = _record_path(folder)
    known = _read(record)
    stamps = {str(f): _stamp(f) for f in files}
    todo = [f for f in files if known.get(str(f)) != stamps[str(f)]]
    if len(todo) >= SAY_AT:
        log.info("checking %d images of %s before training (once)", len(todo), folder)
    checked = {name: stamp for name, stamp in known.items() if name in stamps}
    try:
        for file in todo:
            check_image(file)
            checked[str(file)] = stamps[str(file)]
    finally:
        if checked != known:  # found readable so far, even when one is not
            write_text_atomic(record, json.dumps(checked))


def _stamp(file: Path) -> list[int]:
    stat = file.stat()
    return [stat.st_size, stat.st_mtime_ns]


def _record_path(folder: Path) -> Path:
    digest = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:16]
    return user_cache_dir("image-checks") / f"{digest}.json"


def _read(record: Path) -> dict[str, list[int]]:
    """The record, or nothing when it is missing or unreadable (a file then is checked again)."""
    try:
        found = json.loads(record.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}
