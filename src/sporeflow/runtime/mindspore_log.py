"""Where MindSpore's own log lines go: off the console, which shows what sporeflow says.

MindSpore (C++ glog and its Python logger) reads the GLOG_* variables once, when it loads, so
they are set before the first `import mindspore` of the process (entry.app imports it only
after this). MindSpore 2.10's two halves disagree on GLOG_stderrthreshold (the Python logger
accepts only 0-4, the C++ side only level names: with a number its WARNING lines still reach
stderr beside the log file), so the console is kept clear by the level instead: GLOG_v=3,
errors only, written both to the console and under `<run dir>/mindspore_log/` (one folder per
rank, `rank_<n>/logs/`). msrun workers inherit it from their launcher.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

VARIABLES = ("GLOG_v", "GLOG_logtostderr", "GLOG_log_dir", "GLOG_stderrthreshold")
FOLDER = "mindspore_log"
ERRORS = "3"  # GLOG_v: errors and critical only
WARNINGS = "2"  # MindSpore's own default


def apply(choice: str, run_dir: Path) -> Path | None:
    """Set MindSpore's log variables for this process and its children; returns the folder
    its log files go to (None: not set here). A variable the user exported keeps every one of
    theirs; a process where MindSpore is loaded already keeps what it read."""
    if "mindspore" in sys.modules or any(name in os.environ for name in VARIABLES):
        return None
    if choice == "console":
        os.environ["GLOG_v"] = WARNINGS  # explicit: msrun's workers otherwise get errors only
        return None
    folder = Path(run_dir) / FOLDER
    os.environ.update(GLOG_v=ERRORS, GLOG_logtostderr="0", GLOG_log_dir=str(folder))
    return folder
