"""sporeflow's per-user cache: `$XDG_CACHE_HOME/sporeflow` (default `~/.cache/sporeflow`).

What lives here can always be made again (a data split, an empty MLflow store, MindSpore's
rewritten AMP source); deleting the folder costs the next run a few seconds, nothing else.
"""

from __future__ import annotations

import os
from pathlib import Path


def user_cache_dir(*parts: str) -> Path:
    """The cache folder `parts` (created), e.g. user_cache_dir("digits")."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    folder = root.joinpath("sporeflow", *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder
