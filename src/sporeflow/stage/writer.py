"""The single writer from a stage's EventRecord to its MLflow run (rank 0 only)."""

from __future__ import annotations

from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.tracking.tracker import TrackedRun


class MlflowWriter(HookBase):
    """Sends every recorded event to the run: buffered per step, written at each epoch end
    (after evaluation) and at the end of training, in batches; also when training raised (a
    diverged epoch's losses are in its run)."""

    def __init__(self, record: EventRecord, run: TrackedRun):
        super().__init__()
        self.bind(record)
        self.queue = record.subscribe()
        self.run = run

    def write(self) -> None:
        events, self.queue[:] = list(self.queue), []
        for event in events:
            self.run.log_metrics({event.name: event.value}, event.step)
        self.run.flush()

    def after_epoch(self, epoch: int) -> None:
        self.write()

    def after_train(self) -> None:
        self.write()
