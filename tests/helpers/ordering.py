"""The suite's files, longest first, so two xdist workers finish together.

`make test-all` (and each tier's target) runs every file in one of two workers (`--dist
loadfile`, a module's shared runs made once) in the order the files are collected
(`--no-loadscope-reorder`; xdist would otherwise start with the files holding the most tests,
the cheap unit files, and leave a ten-minute SLURM or msrun file for the end). The order is
longest processing time first: the seconds each file took in a recorded run
(tests/durations.json), or for a file not in it an estimate from its tests (a slow one about
a minute, an e2e one about fifteen seconds).

`SPOREFLOW_TEST_DURATIONS=<path>` makes a run write the seconds each file took to <path>; CI
keeps the file, and committing it as tests/durations.json keeps the order true. Beside it,
<path stem>-cpu.json gets the CPU seconds each file used (user + system of its worker and of
the processes it waited for: train.py, msrun and its workers, servers; not the SLURM
daemons' jobs, which no test process waits for; a child counts when it is waited for, so a
process pool a file leaves behind counts where it ends). On a loaded machine those, not the wall
seconds, say where the suite's time goes: two workers keep both cores busy.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

RECORDED = Path(__file__).resolve().parents[1] / "durations.json"
RECORD_ENV = "SPOREFLOW_TEST_DURATIONS"
SLOW_S, E2E_S, UNIT_S = 60.0, 15.0, 1.0
CPU_KEY = "cpu_s"


def file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def estimate(items) -> dict[str, float]:
    """Seconds per file of `items`: recorded, else estimated from its tests."""
    recorded = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {}
    guess: dict[str, float] = defaultdict(float)
    for item in items:
        slow = item.get_closest_marker("slow") is not None
        e2e = "/e2e/" in f"/{file_of(item.nodeid)}"
        guess[file_of(item.nodeid)] += SLOW_S if slow else E2E_S if e2e else UNIT_S
    return {name: recorded.get(name, seconds) for name, seconds in guess.items()}


def longest_first(items) -> list:
    """`items` with whole files in decreasing order of their seconds (a file's tests keep
    their order)."""
    seconds = estimate(items)
    rank = {name: i for i, name in enumerate(sorted(seconds, key=lambda n: -seconds[n]))}
    return sorted(items, key=lambda item: rank[file_of(item.nodeid)])


class DurationRecorder:
    """Adds up setup, call and teardown seconds per file (in the xdist controller, which sees
    every worker's reports) and writes them to `path` at the end."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[file_of(report.nodeid)] += report.duration
        self.cpu[file_of(report.nodeid)] += dict(report.user_properties).get(CPU_KEY, 0.0)

    def pytest_sessionfinish(self) -> None:
        for seconds, path in ((self.seconds, self.path), (self.cpu, cpu_path(self.path))):
            ordered = dict(sorted(seconds.items(), key=lambda kv: -kv[1]))
            path.write_text(
                json.dumps({k: round(v, 1) for k, v in ordered.items()}, indent=1) + "\n"
            )


def cpu_path(path: Path) -> Path:
    return path.with_name(f"{path.stem}-cpu{path.suffix}")


def _cpu_seconds() -> float:
    """User + system seconds of this process and of the children it has waited for."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class CpuMeter:
    """Puts the CPU seconds of each test phase (setup, call, teardown) into its report's
    user_properties, where the recorder (in the xdist controller) reads them."""

    since = 0.0

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item, nextitem):
        self.since = _cpu_seconds()  # not the worker's own start (imports, collection)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        now = _cpu_seconds()
        outcome.get_result().user_properties.append((CPU_KEY, now - self.since))
        self.since = now


def install(config) -> None:
    """Record durations when asked to: measured in each process that runs tests, added up in
    the one that sees every report."""
    path = os.environ.get(RECORD_ENV)
    if not path:
        return
    config.pluginmanager.register(CpuMeter(), "sporeflow-cpu")
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(path), "sporeflow-durations")
