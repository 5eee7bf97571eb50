"""MindSpore callbacks a stage composes: progress bar, MLflow metrics, eval per epoch, checkpoints.

Metric names follow DESIGN.md: `train/loss`, `eval/acc`, `eval/loss`, `train/images_per_sec`,
with step = global step. Callbacks that talk to people or MLflow are created on rank 0 only.
"""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
from mindspore.train import Callback
from tqdm.auto import tqdm

from sporeflow.checkpoints import prune, save_atomic
from sporeflow.tracking import TrackedRun


def _loss_value(outputs) -> float:
    """The scalar loss from a train network's output (a Tensor, or a tuple starting with it)."""
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    return float(np.asarray(outputs.asnumpy() if hasattr(outputs, "asnumpy") else outputs).mean())


class Throughput(Callback):
    """Images per second per epoch, measured between step ends (so graph compilation in the
    first step of a stage is left out) and logged as `train/images_per_sec`."""

    def __init__(self, batch_size: int, run: TrackedRun | None = None):
        super().__init__()
        self.batch_size = batch_size
        self.run = run
        self.history: list[float] = []
        self._last: float | None = None
        self._images = 0
        self._seconds = 0.0

    def on_train_step_end(self, run_context):
        now = time.perf_counter()
        if self._last is not None:
            self._images += self.batch_size
            self._seconds += now - self._last
        self._last = now

    def on_train_epoch_end(self, run_context):
        if self._seconds > 0:
            rate = self._images / self._seconds
            self.history.append(rate)
            if self.run is not None:
                step = run_context.original_args().cur_step_num
                self.run.log_metrics({"train/images_per_sec": rate}, step)
        self._images, self._seconds = 0, 0.0

    def on_train_epoch_begin(self, run_context):
        self._last = None  # time spent in eval/checkpoints between epochs is not training

    @property
    def mean(self) -> float:
        return float(np.mean(self.history)) if self.history else float("nan")


class ProgressBar(Callback):
    """One tqdm bar over all steps of the stage, with epoch, loss and last eval accuracy."""

    def __init__(self, stage: str, epochs: int, steps_per_epoch: int):
        super().__init__()
        self.bar = tqdm(total=epochs * steps_per_epoch, desc=stage, unit="step",
                        dynamic_ncols=True, mininterval=0.5)
        self.epochs = epochs
        self.last_acc: float | None = None

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        post = {"epoch": f"{cb.cur_epoch_num}/{self.epochs}",
                "loss": f"{_loss_value(cb.net_outputs):.4f}"}
        if self.last_acc is not None:
            post["acc"] = f"{self.last_acc:.4f}"
        self.bar.set_postfix(post, refresh=False)
        self.bar.update(1)

    def on_train_end(self, run_context):
        self.bar.close()


class StepMetrics(Callback):
    """Per-step `train/loss` (every n steps) into the MLflow run, flushed at each epoch end."""

    def __init__(self, run: TrackedRun, every_n_steps: int = 1):
        super().__init__()
        self.run = run
        self.every = every_n_steps

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_step_num % self.every == 0:
            self.run.log_metrics({"train/loss": _loss_value(cb.net_outputs)}, cb.cur_step_num)

    def on_train_epoch_end(self, run_context):
        self.run.flush()


class EvalEachEpoch(Callback):
    """Evaluate on the test split every n epochs (and after the last); logs `eval/<metric>`."""

    def __init__(self, model, eval_data, epochs: int, every_n_epochs: int = 1,
                 run: TrackedRun | None = None, progress: ProgressBar | None = None):
        super().__init__()
        self.model = model
        self.eval_data = eval_data
        self.epochs = epochs
        self.every = every_n_epochs
        self.run = run
        self.progress = progress
        self.history: list[tuple[int, dict]] = []

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        epoch = cb.cur_epoch_num
        if epoch % self.every and epoch != self.epochs:
            return
        result = {k: float(v) for k, v in self.model.eval(self.eval_data, dataset_sink_mode=False).items()}
        self.history.append((epoch, result))
        if self.run is not None:
            self.run.log_metrics({f"eval/{k}": v for k, v in result.items()}, cb.cur_step_num, flush=True)
        if self.progress is not None and "acc" in result:
            self.progress.last_acc = result["acc"]


class CheckpointEachEpoch(Callback):
    """Full train-network checkpoints (weights + optimizer state) every n epochs, last k kept.

    Written atomically, with `epoch_num`/`step_num` inside, as `epoch_0003.ckpt`.
    """

    def __init__(self, directory: Path, every_n_epochs: int = 1, keep_last: int = 2):
        super().__init__()
        self.directory = Path(directory)
        self.every = every_n_epochs
        self.keep = keep_last
        self.saved: list[Path] = []

    def on_train_epoch_end(self, run_context):
        cb = run_context.original_args()
        if cb.cur_epoch_num % self.every:
            return
        path = self.directory / f"epoch_{cb.cur_epoch_num:04d}.ckpt"
        save_atomic(cb.train_network, path,
                    append_dict={"epoch_num": cb.cur_epoch_num, "step_num": cb.cur_step_num})
        self.saved.append(path)
        prune(self.directory, "epoch_*.ckpt", self.keep)
