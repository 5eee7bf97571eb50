"""Whether this process has a terminal to draw progress bars on.

Decided from Python's own stderr (`sys.__stderr__`), which nothing replaces: sporeflow and
Hydra wrap `sys.stderr`, and tqdm's own check (`disable=None`) looks at whatever is there when
a bar starts. A bar belongs on a terminal only: in a log file or a pipe its redraws are noise.
"""

from __future__ import annotations

import os
import sys

FALLBACK_SIZE = (80, 24)  # a terminal that reports no size (a pty nobody sized) still gets a bar


def on_terminal() -> bool:
    """Whether the process's real stderr is a terminal."""
    stream = sys.__stderr__
    try:
        return stream is not None and stream.isatty()
    except ValueError:  # closed
        return False


def bar_options(shown: bool | None = None) -> dict:
    """tqdm's keyword arguments for a bar: `shown` None draws it on a terminal only, True
    always. Its width follows the terminal's, or is FALLBACK_SIZE where there is none or it
    reports 0 columns (tqdm would draw an empty line: 0 rows leave no line for it)."""
    if not (on_terminal() if shown is None else shown):
        return {"disable": True}
    return {"disable": False, **_width()}


def _width() -> dict:
    try:
        columns = os.get_terminal_size(sys.__stderr__.fileno()).columns  # type: ignore[union-attr]
    except (AttributeError, OSError, ValueError):
        columns = 0
    if columns:
        return {"dynamic_ncols": True}
    return {"ncols": FALLBACK_SIZE[0], "nrows": FALLBACK_SIZE[1]}
