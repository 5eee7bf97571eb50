"""The single writer from a stage's EventRecord to its MLflow run (rank 0 only)."""

from __future__ import annotations

from mindspore.train import Callback

from sporeflow.engine.events import EventRecord
from sporeflow.tracking.tracker import TrackedRun


class MlflowWriter(Callback):
    """Sends every recorded event to the run: buffered per step, written at each epoch end
    (after evaluation) and at the end of training, in batches."""

    def __init__(self, record: EventRecord, run: TrackedRun):
        super().__init__()
        self.queue = record.subscribe()
        self.run = run

    def write(self) -> None:
        events, self.queue[:] = list(self.queue), []
        for event in events:
            self.run.log_metrics({event.name: event.value}, event.step)
        self.run.flush()

    def on_train_epoch_end(self, run_context):
        self.write()

    def on_train_end(self, run_context):
        self.write()
