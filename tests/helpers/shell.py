"""The environment a user's shell gives a command, for tests that start one in a new process.

A test process has imported MindSpore, MLflow, Optuna and Hydra, and those imports put variables
into its environment that a user's shell does not have: MindSpore's import sets
`PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python`, which skipped the very log-folder check that
stopped `python train.py` in a launch folder named `x y#1` (issue 75). A command started with
the runner's `os.environ` inherits them and passes where a user's fails. What those imports
add is measured once per test process, in a process started with only PATH and HOME, and left
out; so is what the runner sets for itself (its CPU ISA choice, Hydra's full tracebacks).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

# what the test runner sets for itself (tests/conftest.py chooses the CPU ISA in-process; the
# product chooses its own with runtime.cpu_isa=auto)
RUNNER_ONLY = ("HYDRA_FULL_ERROR", "ONEDNN_MAX_CPU_ISA", "PYTEST_CURRENT_TEST")
_IMPORTS = "mindspore, mlflow, optuna, hydra"
_PROBE = (
    "import json, os; before = dict(os.environ); "
    f"import {_IMPORTS}; "
    "print(json.dumps(sorted(k for k in os.environ if os.environ.get(k) != before.get(k))))"
)


def plain_shell() -> dict[str, str]:
    """A login shell's least: PATH (this venv's bin first, as an activated venv has it), HOME."""
    venv_bin = os.path.dirname(sys.executable)
    return {
        "PATH": f"{venv_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}",
        "HOME": os.environ["HOME"],
    }


@functools.cache
def set_by_imports() -> frozenset[str]:
    """The variables importing the runner's libraries sets, measured in a plain shell's process."""
    out = subprocess.run(
        [sys.executable, "-c", _PROBE],
        env=plain_shell(),
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    return frozenset(json.loads(out.strip().splitlines()[-1]))


def user_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The runner's environment without what its imports and itself set, `extra` over it."""
    dropped = set_by_imports() | set(RUNNER_ONLY)
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    env.update(extra or {})
    return env
