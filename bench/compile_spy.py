"""`python bench/compile_spy.py REPO ARGS...`: REPO's `train.py ARGS` run in this process with
MindSpore's graph compiles counted (a graph MindSpore had not compiled before, by cell class)
and the seconds of compiles and of graph runs (every train, eval and export step) summed (and
by cell class, with their number), the
seconds inside MindSpore's `Model.train` and `Model.eval` (the outermost call: the steps with
their data pipeline and callbacks), and how many of the compiled graphs came from sporeflow's
compile cache; one
JSON line on stdout at exit. A Hydra launcher that runs jobs in other processes (joblib) is seen
only as far as this process goes: use it with the basic launcher."""

from __future__ import annotations

import atexit
import json
import runpy
import sys
import time
from collections import Counter
from pathlib import Path

from mindspore.graph.api import _CellGraphExecutor
from mindspore.train import Model

STARTED = time.perf_counter()
compiles: Counter = Counter()
seconds = {"compile": 0.0, "graph runs": 0.0, "model loops": 0.0}
runs_by_cell: dict[str, list] = {}  # cell class: [graph runs, their seconds]
_compile, _run = _CellGraphExecutor.compile, _CellGraphExecutor.__call__
_inside = [0]  # Model.train/eval calls open (an evaluation inside a train callback is nested)


def counted_compile(self, obj, *args, phase="predict", **kwargs):
    start = time.perf_counter()
    full_phase, new = _compile(self, obj, *args, phase=phase, **kwargs)
    seconds["compile"] += time.perf_counter() - start
    if new:
        compiles[type(obj).__name__] += 1
    return full_phase, new


def timed_run(self, obj, *args, **kwargs):
    start = time.perf_counter()
    try:
        return _run(self, obj, *args, **kwargs)
    finally:
        took = time.perf_counter() - start
        seconds["graph runs"] += took
        runs = runs_by_cell.setdefault(type(obj).__name__, [0, 0.0])
        runs[0], runs[1] = runs[0] + 1, runs[1] + took


def timed_loop(method):
    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        _inside[0] += 1
        try:
            return method(self, *args, **kwargs)
        finally:
            _inside[0] -= 1
            if not _inside[0]:
                seconds["model loops"] += time.perf_counter() - start

    return timed


def report() -> None:
    wall = time.perf_counter() - STARTED
    cache = sys.modules.get("sporeflow.engine.compile_cache")  # absent in code before it
    loaded = cache.counts()[1] if cache is not None else 0
    found = {"wall": wall, "compiles": dict(compiles), "loaded": loaded, **seconds}
    found["runs by cell"] = runs_by_cell
    print(json.dumps(found), flush=True)


if __name__ == "__main__":
    repo = Path(sys.argv[1])
    sys.path.insert(0, str(repo / "src"))
    _CellGraphExecutor.compile, _CellGraphExecutor.__call__ = counted_compile, timed_run
    Model.train, Model.eval = timed_loop(Model.train), timed_loop(Model.eval)
    atexit.register(report)
    sys.argv = [str(repo / "train.py"), *sys.argv[2:]]
    runpy.run_path(sys.argv[0], run_name="__main__")
