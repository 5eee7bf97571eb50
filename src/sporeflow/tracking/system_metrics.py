"""MLflow system metrics (CPU, memory, disk, network; GPU where present) for each live run
that asks for them, sampled by MLflow's own monitor in the tracking writer.

Why in the writer: the figures are the machine's, the same from any of its processes, and
sampling them there costs the training process nothing. Unlike every other record, samples
go to the store directly (not through the journal): a sample the store misses while it is
down is an observation lost, never a result, and `sporeflow sync` (after the fact) samples
nothing.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


class SystemMetrics:
    """One MLflow SystemMetricsMonitor per run id, started and finished by the applier."""

    def __init__(self, uri: str):
        self.uri = uri
        self._monitors: dict[str, Any] = {}

    def start(self, run_id: str, interval: float, resume: bool = False) -> None:
        if interval <= 0 or run_id in self._monitors:
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        for chatty in ("mlflow.system_metrics", "mlflow.system_metrics.system_metrics_monitor"):
            logging.getLogger(chatty).setLevel(logging.WARNING)
        monitor = SystemMetricsMonitor(
            run_id, sampling_interval=interval, resume_logging=resume, tracking_uri=self.uri
        )
        monitor.start()
        self._monitors[run_id] = monitor

    def stop(self, run_id: str) -> None:
        """Finish the run's monitor before the run is ended, with one last sample taken now:
        a run shorter than the interval (or one the writer reached late) still gets one."""
        monitor = self._monitors.pop(run_id, None)
        if monitor is None:
            return
        monitor.finish()
        try:
            monitor.collect_metrics()
            monitor.publish_metrics(monitor.aggregate_metrics())
            monitor.mlflow_logger.flush()
        except Exception as ex:  # noqa: BLE001 - an observation lost, never the run's record
            log.warning("last system metrics sample of run %s not sent: %s", run_id, ex)

    def stop_all(self) -> None:
        for run_id in list(self._monitors):
            self.stop(run_id)
