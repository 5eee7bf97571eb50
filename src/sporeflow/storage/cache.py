"""sporeflow's per-user cache: `$XDG_CACHE_HOME/sporeflow` (default `~/.cache/sporeflow`).

What lives here can always be made again (a data split, an empty MLflow store, MindSpore's
rewritten AMP source, image checks); deleting the folder costs the next run a few seconds,
nothing else. So a cache folder that cannot be written (a read-only home, XDG_CACHE_HOME on a
read-only mount) is no reason to stop a job: `usable_cache_dir` says so in one line and the
cache is off for the run.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from sporeflow.storage.files import unwritable

log = logging.getLogger(__name__)
_SAID: set[Path] = set()  # cache folders whose problem this process has said


def user_cache_dir(*parts: str) -> Path:
    """The cache folder `parts` (created), e.g. user_cache_dir("digits")."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = root.joinpath("sporeflow", *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def usable_cache_dir(*parts: str, off: str) -> Path | None:
    """user_cache_dir(*parts) when this process can write it; None when it cannot, said once a
    process in one warning line naming the folder, why, and `off` (what the run does without
    this cache)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = root.joinpath("sporeflow", *parts)
    try:
        made = user_cache_dir(*parts)
        problem = unwritable(made)
    except OSError as ex:
        problem = ex.strerror or str(ex)
    if problem is None:
        return made
    if folder not in _SAID:
        _SAID.add(folder)
        log.warning(
            "cache %s cannot be written (%s): off for this run, %s; set XDG_CACHE_HOME to a "
            "writable folder to keep it",
            folder,
            problem,
            off,
        )
    return None
