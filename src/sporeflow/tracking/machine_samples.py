"""A machine's system metrics sampled in the training process, for a job whose tracking writer
runs on another machine (a SLURM sweep's writer on the submitting machine follows the jobs on
the nodes, tracking.shared_writer): the figures are the node's, so they are taken on it.

The same figures under the same names as MLflow's own monitor (tracking.system_metrics, run in
a writer on the job's machine): CPU, memory, the root disk, network bytes since the sampling
began, as the run's metrics `system/<name>` with steps 0, 1, ... . They are taken with psutil at
the tracker's appends once `interval` seconds have passed, and once more as a run ends (a run
shorter than the interval still gets one), and journalled like any metric: no MLflow import in
the trainer, and the store gets each sample exactly once.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil

from sporeflow.tracking.journal import AppliedState, Op, journals_under, read_records

PREFIX = "system/"


class MachineSampler:
    """This machine's figures, at most every `interval` seconds (`due`)."""

    def __init__(self, interval: float):
        self.interval = interval
        self.last = time.monotonic()
        net = psutil.net_io_counters()
        self._net_start = (net.bytes_recv / 1e6, net.bytes_sent / 1e6)
        psutil.cpu_percent()  # CPU use is measured from one call to the next: from now

    def due(self) -> bool:
        return time.monotonic() - self.last >= self.interval

    def sample(self) -> dict[str, float]:
        """One sample, named and scaled as MLflow's CPU, disk and network monitors name them."""
        self.last = time.monotonic()
        memory, disk, net = (
            psutil.virtual_memory(),
            psutil.disk_usage(os.sep),
            psutil.net_io_counters(),
        )
        to_round = {
            "cpu_utilization_percentage": psutil.cpu_percent(),
            "system_memory_usage_megabytes": memory.used / 1e6,
            "system_memory_usage_percentage": memory.used / memory.total * 100,
            "disk_usage_percentage": disk.percent,
            "disk_usage_megabytes": disk.used / 1e6,
            "disk_available_megabytes": disk.free / 1e6,
        }
        figures = {name: round(value, 1) for name, value in to_round.items()}
        figures["network_receive_megabytes"] = net.bytes_recv / 1e6 - self._net_start[0]
        figures["network_transmit_megabytes"] = net.bytes_sent / 1e6 - self._net_start[1]
        return {PREFIX + name: value for name, value in figures.items()}


def next_step(journal_dir: Path, run_id: str) -> int:
    """The step after the last system sample that journals under `journal_dir` hold for
    `run_id` (an MLflow id; a journal names a run it created by its key): where a continued
    run's samples go on. 0 when there is none."""
    last = -1
    for journal in journals_under(journal_dir):
        names = {key for key, found in AppliedState.load(journal).runs.items() if found == run_id}
        names.add(run_id)
        for record in read_records(journal):
            if record["op"] == Op.metrics.value and record.get("run") in names:
                steps = [p[3] for p in record["points"] if str(p[0]).startswith(PREFIX)]
                last = max([last, *steps])
    return last + 1


class RunSamples:
    """The runs a process samples its machine for, each with its next step; `take` gives the
    metrics records to journal now."""

    def __init__(self) -> None:
        self.steps: dict[str, int] = {}
        self._sampler: MachineSampler | None = None

    def add(self, run: str, interval: float, step: int = 0) -> None:
        if self._sampler is None:
            self._sampler = MachineSampler(interval)
        self.steps[run] = step

    def take(self, ending: str | None = None) -> list[tuple[str, list]]:
        """(run, points) for every sampled run when a sample is due or `ending` (a sampled run
        about to end) needs its last; `ending` is sampled no more after."""
        if self._sampler is None or not self.steps:
            return []
        if ending not in self.steps and not self._sampler.due():
            return []
        now = int(time.time() * 1000)
        figures = self._sampler.sample()
        taken = []
        for run, step in self.steps.items():
            taken.append((run, [[name, value, now, step] for name, value in figures.items()]))
            self.steps[run] = step + 1
        self.steps.pop(ending or "", None)
        return taken
