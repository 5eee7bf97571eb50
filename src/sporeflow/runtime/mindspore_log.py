"""Where MindSpore's own log lines go: off the console, which shows what sporeflow says.

MindSpore (C++ glog and its Python logger) reads the GLOG_* variables once, when it loads, so
they are set before the first `import mindspore` of the process (`load`, which entry.app calls
right after this). Every line from WARNING up goes to `<run dir>/mindspore_log/rank_<n>/logs/`;
the console gets errors only. MindSpore 2.10's two halves disagree on GLOG_stderrthreshold:
the Python logger accepts only 0-4 (it raises at import on a name), the C++ side only level
names (a number means WARNING). So the process's variable holds the Python half's "3" and,
for the moment MindSpore loads, the C environment (what the C++ half reads, `os.putenv`) holds
"ERROR"; then it is put back, so child processes inherit a value both halves read. msrun's
workers inherit the variables with the mark sporeflow sets and do the same.

MindSpore's Python half refuses, as it loads, a log folder whose real path holds anything but
ASCII letters, digits and `/@_-.:\\` (`mindspore.log._check_directory_by_regular`): a launch
folder named `x y#1` or `100%` would stop every job before it starts. Such a run dir's log goes
to a folder of that form under the temporary directory, named by a digest of the run dir, and
`<run dir>/mindspore_log` links to it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import sys
import tempfile
from pathlib import Path

VARIABLES = ("GLOG_v", "GLOG_logtostderr", "GLOG_log_dir", "GLOG_stderrthreshold")
MARK = "SPOREFLOW_MINDSPORE_LOG"  # the GLOG_* variables are sporeflow's own, not the user's
FOLDER = "mindspore_log"
WARNINGS = "2"  # GLOG_v: MindSpore's own default, warnings and up
CONSOLE_ERRORS = ("3", "ERROR")  # GLOG_stderrthreshold as the Python half / the C++ half read it
# the folder names MindSpore's Python logger accepts (mindspore/log.py, _check_directory_by_regular)
LEGAL_FOLDER = re.compile(r"^[/0-9a-zA-Z@_\-.:\\]+$", re.ASCII)


def apply(choice: str, run_dir: Path) -> Path | None:
    """Set MindSpore's log variables for this process and its children; returns the folder
    its log files go to (None: not set here). A variable the user exported keeps every one of
    theirs; a process where MindSpore is loaded already keeps what it read."""
    if "mindspore" in sys.modules:
        return None
    if MARK not in os.environ and any(name in os.environ for name in VARIABLES):
        return None
    if choice == "console":
        os.environ.update({"GLOG_v": WARNINGS, MARK: choice})  # msrun's workers get it too
        return None
    folder = log_folder(Path(run_dir))
    if folder is None:  # no folder MindSpore accepts: its warnings stay off, errors on the console
        os.environ.update({"GLOG_v": CONSOLE_ERRORS[0], MARK: "console"})
        return None
    python_half, cpp_half = CONSOLE_ERRORS
    os.environ.update(
        {
            "GLOG_v": WARNINGS,
            "GLOG_logtostderr": "0",
            "GLOG_log_dir": str(folder),
            "GLOG_stderrthreshold": python_half,
            MARK: choice,
        }
    )
    os.putenv("GLOG_stderrthreshold", cpp_half)
    return folder


def log_folder(run_dir: Path) -> Path | None:
    """Where MindSpore's log of `run_dir` goes: `<run dir>/mindspore_log` when MindSpore accepts
    its real path; else a folder it accepts under the temporary directory, linked from there.
    None when neither can be made (the temporary directory's own name is refused, or no link)."""
    folder = run_dir / FOLDER
    if _legal(folder):
        return folder
    digest = hashlib.blake2b(str(run_dir.resolve()).encode(), digest_size=8).hexdigest()
    mine = Path(tempfile.gettempdir()) / f"sporeflow-{os.getuid()}"
    elsewhere = mine / FOLDER / digest
    if not _legal(elsewhere):
        return None
    try:
        mine.mkdir(mode=0o700, exist_ok=True)
        if mine.is_symlink() or mine.stat().st_uid != os.getuid():  # another user's folder
            return None
        elsewhere.mkdir(parents=True, exist_ok=True)
        run_dir.mkdir(parents=True, exist_ok=True)
        if not folder.is_symlink():
            folder.symlink_to(elsewhere, target_is_directory=True)
    except OSError:
        return None
    return elsewhere


def _legal(folder: Path) -> bool:
    return LEGAL_FOLDER.match(os.path.realpath(folder)) is not None


def load() -> None:
    """Import MindSpore with the variables `apply` set, then give child processes the value
    of GLOG_stderrthreshold that both of MindSpore's halves read."""
    import mindspore  # noqa: F401 - loading it is the point

    if "GLOG_stderrthreshold" in os.environ:
        os.putenv("GLOG_stderrthreshold", os.environ["GLOG_stderrthreshold"])
    if os.environ.get(MARK) == "run_dir":
        _file_best_effort()


def _file_best_effort() -> None:
    """MindSpore's Python log file is best effort: on a full disk (the run dir's) its handler
    would print '--- Logging error ---' and a traceback onto the console for every line it
    cannot write, beside the one line that says the disk is full. A lost line of MindSpore's
    log is not worth that."""
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith("ME.") and isinstance(logger, logging.Logger):
            for handler in logger.handlers:
                if isinstance(handler, logging.FileHandler):
                    handler.handleError = _ignored  # type: ignore[method-assign]


def _ignored(record: logging.LogRecord) -> None:
    return None
