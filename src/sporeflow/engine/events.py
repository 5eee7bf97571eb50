"""The per-stage record of what happened: scalars by global step and eval results by epoch.

Hooks that measure (loss, throughput, evaluation) put into it; hooks that act on measurements
(progress bar, best-k checkpoints) and the stage's one writer (stage.writer, the only hook
holding a run) read from it. No hook reaches into another: what one needs of another comes
through the stage's Trainer (the shape of detectron2's EventStorage and its writers).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Event:
    name: str  # e.g. "train/loss", "val/acc", "train/images_per_sec"
    value: float
    step: int  # global optimizer step of the stage (continues across a resume)


class EventRecord:
    """What one stage has measured so far.

    `start_epoch` is where a resumed stage continues (and `start_batches`, the batches of its
    next epoch it had trained on when it stopped mid-epoch): MindSpore's
    `Model.train(initial_epoch=e)` restarts `cur_step_num` at 1 while `cur_epoch_num` stays
    absolute, so the record turns MindSpore's step counter into the stage's global step.
    """

    def __init__(
        self, epochs: int, steps_per_epoch: int, start_epoch: int = 0, start_batches: int = 0
    ):
        self.epochs = epochs
        self.steps_per_epoch = steps_per_epoch
        self.start_epoch = start_epoch
        self.steps_before = start_epoch * steps_per_epoch + start_batches
        self.evals: list[tuple[int, dict]] = []  # (epoch, {metric: value}), in epoch order
        self._latest: dict[str, Event] = {}
        self._queues: list[list[Event]] = []

    def global_step(self, cb_params) -> int:
        """The stage's global step from MindSpore's callback parameters."""
        return self.steps_before + cb_params.cur_step_num

    def step_in_epoch(self, cb_params) -> int:
        """Batches of the current epoch trained so far (1 .. steps_per_epoch)."""
        return self.global_step(cb_params) - (cb_params.cur_epoch_num - 1) * self.steps_per_epoch

    def put(self, name: str, value: float, step: int) -> None:
        event = Event(name, float(value), int(step))
        self._latest[name] = event
        for queue in self._queues:
            queue.append(event)

    def put_eval(self, epoch: int, step: int, result: dict) -> None:
        """An evaluation of the validation split after `epoch`: kept by epoch, and each metric
        as `val/<metric>` (what every choice during training reads)."""
        self.evals.append((epoch, dict(result)))
        for key, value in result.items():
            self.put(f"val/{key}", value, step)

    def latest(self, name: str) -> float | None:
        event = self._latest.get(name)
        return None if event is None else event.value

    def latest_eval(self) -> tuple[int, dict] | None:
        return self.evals[-1] if self.evals else None

    def subscribe(self) -> list[Event]:
        """A queue that receives every event put from now on; the reader empties it."""
        queue: list[Event] = []
        self._queues.append(queue)
        return queue
