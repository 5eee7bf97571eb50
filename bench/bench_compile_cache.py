"""The compile cache as a user iterating meets it (issue 64): in a fresh cache folder, each
command after the previous ended,

    python train.py
    python train.py optimizer=adam
    python train.py

run by this checkout and by another one (`before`: its src/ first on the path, on this venv),
each command's graphs loaded from the cache of those compiled, its start-up to the first step
(`train/seconds_to_first_step`) and its wall. Then the cache folder's size after 20 different
small jobs (`debug=quick`: 1 epoch), one after another in one fresh folder.

Usage: python bench/bench_compile_cache.py [BEFORE_REPO] [sizes]
  (BEFORE_REPO: a checkout of the code before, read only; `sizes`: also the 20 jobs)
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainjob import REPO, runs

COMMANDS = [[], ["optimizer=adam"], []]
TWENTY = [  # 20 jobs whose graphs differ: optimizer, network, batch size, loss
    *([f"optimizer={o}"] for o in ("momentum", "adam", "adamw", "sgd", "adagrad")),
    *(["model=mlp", f"optimizer={o}"] for o in ("momentum", "adam", "adamw", "sgd", "adagrad")),
    *([f"dataset.batch_size={b}"] for b in (16, 48, 64, 128)),
    *(["model=mlp", f"dataset.batch_size={b}"] for b in (16, 48, 64, 128)),
    ["loss=ce_smooth"],
    ["model=mlp", "loss=ce_smooth"],
]


def job(repo: Path, args: list[str], cache: Path, launch: Path) -> dict:
    """One `python train.py ARGS` of `repo` in `launch`: graphs loaded/compiled, start-up, wall."""
    launch.mkdir(parents=True)
    env = {**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONDONTWRITEBYTECODE": "1"}
    env["PYTHONPATH"] = str(repo / "src")
    cmd = [sys.executable, str(repo / "train.py"), f"runtime.compile_cache_dir={cache}", *args]
    cmd += ["hydra.run.dir=run", "callbacks.progress_bar=false"]
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=launch, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    found = re.findall(r"compile cache: (\d+) of (\d+) graphs loaded", proc.stdout + proc.stderr)
    loaded, compiled = map(int, found[-1]) if found else (0, 0)
    _, (run, *_) = runs(launch)
    startup = run.data.metrics.get("train/seconds_to_first_step", float("nan"))
    return {"loaded": loaded, "compiled": compiled, "startup": startup, "wall": wall}


def size_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 2**20


def three_commands(repos: dict[str, Path]) -> None:
    print("python train.py; python train.py optimizer=adam; python train.py - one fresh cache")
    print(f"  {'code':8} {'command':32} {'loaded':>9} {'to 1st step s':>14} {'wall s':>7}")
    for name, repo in repos.items():
        with tempfile.TemporaryDirectory() as tmp:
            for n, args in enumerate(COMMANDS):
                got = job(repo, args, Path(tmp) / "cache", Path(tmp) / f"job-{n}")
                command = " ".join(["python train.py", *args])
                loaded = f"{got['loaded']} of {got['compiled']}"
                print(
                    f"  {name:8} {command:32} {loaded:>9} {got['startup']:14.1f} "
                    f"{got['wall']:7.1f}",
                    flush=True,
                )


def twenty_jobs(repos: dict[str, Path]) -> None:
    print("the cache folder after 20 different debug=quick jobs, one after another:")
    for name, repo in repos.items():
        with tempfile.TemporaryDirectory() as tmp:
            cache, loaded, compiled = Path(tmp) / "cache", 0, 0
            for n, args in enumerate(TWENTY):
                got = job(repo, ["debug=quick", *args], cache, Path(tmp) / f"job-{n}")
                loaded, compiled = loaded + got["loaded"], compiled + got["compiled"]
            print(
                f"  {name:8} {size_mb(cache):6.1f} MB, {loaded} of {compiled} graphs loaded "
                "over the 20",
                flush=True,
            )


if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "src"))
    repos = {"now": REPO}
    if len(sys.argv) > 1 and sys.argv[1] != "sizes":
        repos = {"before": Path(sys.argv[1]).resolve(), **repos}
    three_commands(repos)
    if "sizes" in sys.argv:
        twenty_jobs(repos)
