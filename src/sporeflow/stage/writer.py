"""The one road from a stage to its MLflow run: what it measured while it trained (the
EventRecord's events), its tags, the data it saw, its final metrics, files and model. Rank 0
writes; on the other ranks a writer holds no run and writes nothing, so the stage's code says
what it records once, for every rank."""

from __future__ import annotations

from pathlib import Path

from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase
from sporeflow.stage import outputs
from sporeflow.tracking.tracker import TrackedRun


class StageWriter(HookBase):
    """Sends every recorded event to the run: buffered per step, written at each epoch end
    (after evaluation) and at the end of training, in batches; also when training raised (a
    diverged epoch's losses are in its run). The stage's other records go through its methods.
    `run` None: a rank that does not record (every method returns at once)."""

    place = "record"

    def __init__(self, run: TrackedRun | None):
        super().__init__()
        self.run = run
        self.queue: list = []

    @property
    def run_id(self) -> str | None:
        return None if self.run is None else self.run.run_id

    def follow(self, record: EventRecord) -> StageWriter:
        """Write what `record` receives from now on (the hook of the `record` phase)."""
        self.bind(record)
        self.queue = record.subscribe() if self.run is not None else []
        return self

    def write(self) -> None:
        events, self.queue[:] = list(self.queue), []
        if self.run is None:
            return
        for event in events:
            self.run.log_metrics({event.name: event.value}, event.step)
        self.run.flush()

    def after_epoch(self, epoch: int) -> None:
        self.write()

    def after_train(self) -> None:
        self.write()

    def tags(self, tags: dict) -> None:
        if self.run is not None:
            self.run.set_tags(tags)

    def metrics(self, metrics: dict, step: int, flush: bool = False) -> None:
        if self.run is not None:
            self.run.log_metrics(metrics, step, flush=flush)

    def files(self, paths: list[Path], folder: str | None = None) -> None:
        """Each file as an artifact (in `folder`), its SHA-256 recorded to check it on reuse."""
        if self.run is None:
            return
        for path in paths:
            self.run.log_artifact(path, folder, checksum=True)

    def data(self, data) -> None:
        """The splits of the job's data set as the run's dataset inputs (stage.outputs)."""
        if self.run is not None:
            outputs.record_data(self.run, data)

    def model(
        self, cfg, config, network, weights: Path, eval_data, stage_dir: Path, step: int
    ) -> None:
        """The final network packaged as the run's model (stage.outputs; `config`: the typed
        twin of `cfg`)."""
        if self.run is not None:
            outputs.record_model(
                cfg, config, self.run, network, weights, eval_data, stage_dir, step
            )
