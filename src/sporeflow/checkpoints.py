"""Checkpoint files: atomic writes (a kill mid-save never leaves a truncated file) and pruning."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import mindspore as ms


def save_atomic(obj: Any, path: str | os.PathLike, append_dict: dict | None = None) -> Path:
    """Save a Cell or parameter list to `path` via a temp file in the same directory + rename."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        ms.save_checkpoint(obj, str(tmp), append_dict=append_dict)
        # MindSpore appends ".ckpt" to names not ending in it
        written = tmp if tmp.exists() else tmp.with_name(tmp.name + ".ckpt")
        os.replace(written, path)
    finally:
        for leftover in (tmp, tmp.with_name(tmp.name + ".ckpt")):
            leftover.unlink(missing_ok=True)
    return path


def prune(directory: str | os.PathLike, pattern: str, keep: int) -> list[Path]:
    """Delete all but the `keep` last (by name) files matching `pattern`; returns what was deleted."""
    files = sorted(Path(directory).glob(pattern))  # names carry zero-padded epochs
    doomed = files[:-keep] if keep > 0 else files
    for f in doomed:
        f.unlink(missing_ok=True)
    return doomed
