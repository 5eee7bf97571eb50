"""What a run's console shows: sporeflow's lines and, on a terminal only, the progress bar;
MindSpore's own warnings only when asked for (runtime.mindspore_log=console)."""

from __future__ import annotations

import os
import pty
import re
import subprocess

from helpers.train import run_train, train_command

BAR = re.compile(r"train: +\d+%\|")
MINDSPORE_LINE = re.compile(r"^\[(WARNING|INFO|DEBUG)\] [A-Z_]+\(\d+", re.M)


def run_on_a_terminal(args, cwd) -> str:
    """`python train.py ARGS` with stdout and stderr on a fresh pseudo-terminal (no size set,
    as under `script` without a terminal); what the terminal received."""
    cmd, env = train_command(args, cwd)
    main, child = pty.openpty()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=child, stderr=child)
    os.close(child)
    received = b""
    while True:
        try:
            chunk = os.read(main, 65536)
        except OSError:  # EIO: every holder of the terminal's other end is gone
            break
        if not chunk:
            break
        received += chunk
    os.close(main)
    assert proc.wait(timeout=300) == 0, received.decode(errors="replace")[-3000:]
    return received.decode(errors="replace")


def test_a_terminal_gets_the_bar_and_no_mindspore_warnings(tmp_path):
    shown = run_on_a_terminal(["debug=quick", "callbacks.progress_bar=true"], tmp_path)
    assert BAR.search(shown), shown[-2000:]
    assert not MINDSPORE_LINE.search(shown), shown[-2000:]
    logged = "".join(p.read_text() for p in (tmp_path / "run" / "mindspore_log").rglob("*.log*"))
    assert re.search(r"^\[WARNING\] PIPELINE\(", logged, re.M), "no warning in the run's log"


def test_a_file_gets_no_bar_and_mindspores_warnings_when_asked(tmp_path):
    args = ["debug=quick", "callbacks.progress_bar=true", "runtime.mindspore_log=console"]
    done = run_train(args, tmp_path, env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not BAR.search(done.stderr + done.stdout)
    assert MINDSPORE_LINE.search(done.stderr), done.stderr[-2000:]
