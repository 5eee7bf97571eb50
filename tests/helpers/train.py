"""Run `python train.py` as a real subprocess, the way a user does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.shell import user_env
from sporeflow.launch.msrun import override

REPO = Path(__file__).resolve().parents[2]
CONF = REPO / "conf"
TRAIN = REPO / "train.py"
TESTS = REPO / "tests"

# a stand-alone job on the batch a data2 or two-node job splits in two (drop_remainder: every
# worker sees whole batches, so the weights can match)
COMBINED_BATCH = ["+dataset.drop_remainder=true", "epochs=2", "dataset.batch_size=32"]
# the dim-reduce sweep: two jobs that share stage 1 and the baselines
# a launch folder named with every character issue 60 reported (a space, '?', '#', '%', a
# non-ASCII letter): the shared sweep, a data-parallel job and tests/e2e/test_fresh_process.py
# run in one, so each path handed to another program's rules (a store URI, MindSpore's file
# names, msrun's and Hydra's command lines) is tried at no extra cost
ODD_FOLDER = "launch dir ?#%é"
# a small job on an image folder (dataset=imagenet's layout) of three 32 x 32 classes
IMAGE_FOLDER_JOB = [
    "debug=quick",
    "dataset=imagenet",
    "dataset.image_size=32",
    "dataset.num_classes=3",
    "dataset.batch_size=8",
]
RHO_SWEEP = ["debug=dim_reduce", "boost.baselines=[baseline,snapshot_mean]", "boost.rho=0.4,0.7"]


def train_command(args, cwd: Path, run_dir: str | None = "run", env: dict | None = None):
    """(argv, env) of `python train.py ARGS` launched in `cwd`, Hydra run dir cwd/<run_dir>
    (run_dir=None: Hydra's own default, outputs/<date>/<time>_<uid>)."""
    full_env = user_env(env)  # runtime.cpu_isa=auto chooses the ISA, unless a test exports one
    where = [override("hydra.run.dir", cwd / run_dir)] if run_dir is not None else []
    cmd = [sys.executable, str(TRAIN), *where, "callbacks.progress_bar=false", *args]
    return cmd, full_env


def run_train(
    args, cwd: Path, env: dict | None = None, timeout: float = 600, run_dir: str | None = "run"
) -> subprocess.CompletedProcess:
    """Run `python train.py ARGS` to the end in `cwd` (the launch dir)."""
    cmd, full_env = train_command(args, cwd, run_dir, env)
    return subprocess.run(
        cmd, cwd=cwd, env=full_env, capture_output=True, text=True, timeout=timeout
    )


def multirun_command(cwd: Path, *args: str) -> tuple[list[str], dict]:
    """(argv, env) of `python train.py -m ARGS` in `cwd`: sweep dir cwd/multirun, the default
    store (the launch dir's sqlite file, whatever the environment says)."""
    cmd = [
        sys.executable,
        str(TRAIN),
        "-m",
        *args,
        override("hydra.sweep.dir", cwd / "multirun"),
        "callbacks.progress_bar=false",
    ]
    return cmd, user_env({"MLFLOW_TRACKING_URI": ""})


def multirun(cwd: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python train.py -m ARGS` in `cwd` to the end (multirun_command)."""
    cmd, env = multirun_command(cwd, *args)
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)


def start_multirun(cwd: Path, *args: str) -> subprocess.Popen:
    """`python train.py -m ARGS` in `cwd` started (multirun_command), its stderr piped."""
    cmd, env = multirun_command(cwd, *args)
    return subprocess.Popen(cmd, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True)


def sporeflow_cli(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """The `sporeflow` console script of this venv, run in `cwd` against its default store."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "sporeflow"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        env=user_env({"MLFLOW_TRACKING_URI": ""}),
        timeout=timeout,
    )


def start_and_wait_for_a_checkpoint(
    args, cwd: Path, first_ckpt: str, run_dir: str = "run", env: dict | None = None
) -> subprocess.Popen:
    """`python train.py ARGS` started in `cwd`; returns once `<run dir>/<first_ckpt>` exists."""
    import time

    cmd, full_env = train_command(args, cwd, run_dir, env)
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    deadline = time.time() + 300
    while not (cwd / run_dir / first_ckpt).exists():
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.time() < deadline, "no checkpoint within 300 s"
        time.sleep(0.2)
    return proc
