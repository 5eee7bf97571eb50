"""Where the README sweep's wall goes (issue 64, item 2): `python train.py -m ...` with an empty
compile cache in a fresh launch folder, sampled by py-spy (100 Hz, non-blocking, idle samples
kept, the main thread only: its samples add up to the wall), each sample put in the first part
of the table whose pattern its stack matches: MindSpore's compiles, graph runs and data pipeline
wherever they were called (a training step, an evaluation, the predictions pass, the MINDIR
export), then the steps' own Python, then the sweep's other work. py-spy's sampling slows the
process by about a tenth: read the shares.
Needs py-spy (`pip install py-spy`; not a project dependency).
Usage: python bench/profile_sweep.py
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench_sweep import SWEEP
from trainjob import REPO

RATE = 100
MINDSPORE = (  # anywhere in a sample's stack: MindSpore's own work, wherever it was called
    ("MindSpore: compiles", r"compile \(mindspore/graph/api\.py|compile_cache\.py|compile_phase"),
    ("MindSpore: graph runs", r"mindspore/graph/api\.py"),
    ("MindSpore: data pipeline", r"mindspore/dataset/"),
)
FIT = r"mindspore/train/model\.py"  # Model.train / Model.eval: the steps' own Python
OUTSIDE = (  # the rest, by the first pattern its stack matches
    ("the sweep's end (table, decision, importances, plots)", r"sweep_summary\.py"),
    ("per-job figures (comparison, cost)", r"cost_report\.py|report/comparison\.py"),
    ("reuse: turns and store reads", r"job/reuse\.py"),
    ("garbage collection at a job's start", r"runtime/heap\.py"),
    ("Hydra composing and validating jobs", r"validate_batch_is_legal|load_sweep_config"),
    ("imports", r"_find_and_load"),
    ("a stage's parts built", r"stage/build\.py"),
    ("store reads", r"tracking/"),
)


def part(stack: str) -> str:
    """The table's part a main-thread sample belongs to."""
    found = next((name for name, rx in MINDSPORE if re.search(rx, stack)), None)
    if found is None and re.search(FIT, stack):
        found = "steps' Python (callbacks, hooks, Model.train)"
    return found or next((name for name, rx in OUTSIDE if re.search(rx, stack)), "other")


def main() -> None:
    if shutil.which("py-spy") is None:
        sys.exit("profile_sweep: needs py-spy on PATH (pip install py-spy)")
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "samples.txt"
        args = [*SWEEP, "runtime.compile_cache_dir=compile-cache", f"hydra.sweep.dir={tmp}/m"]
        start = time.perf_counter()
        subprocess.run(
            ["py-spy", "record", "--nonblocking", "--idle", "--threads", f"--rate={RATE}"]
            + ["--format=raw", "-o", str(raw), "--", sys.executable, str(REPO / "train.py")]
            + args,
            cwd=tmp,
            env={**os.environ, "MLFLOW_TRACKING_URI": ""},
            check=True,
            capture_output=True,
        )
        wall = time.perf_counter() - start
        seconds: Counter[str] = Counter()
        for line in raw.read_text().splitlines():
            stack, _, count = line.rpartition(" ")
            if stack.split(";")[0].startswith("thread") and "MainThread" in stack.split(";")[0]:
                seconds[part(stack)] += int(count) / RATE
    total = sum(seconds.values())
    print(f"the README sweep, cold compile cache, under py-spy: wall {wall:.1f} s, main thread")
    print(f"sampled {total:.1f} s; seconds and share of the main thread's samples:")
    for name in sorted(seconds, key=lambda n: (not n.startswith("MindSpore"), -seconds[n])):
        print(f"  {seconds[name]:6.1f} s  {seconds[name] / total:6.1%}  {name}")


if __name__ == "__main__":
    main()
