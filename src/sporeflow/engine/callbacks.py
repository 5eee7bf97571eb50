"""MindSpore callbacks a stage composes: progress bar, MLflow metrics, eval per epoch, checkpoints.

Metric names follow DESIGN.md: `train/loss`, `eval/acc`, `eval/loss`, `train/images_per_sec`,
with step = global step. Callbacks that talk to people or MLflow are created on rank 0 only.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, ContextManager

import numpy as np
from mindspore.train import Callback
from tqdm.auto import tqdm

from sporeflow.checkpoints import prune, save_atomic
from sporeflow.tracking import TrackedRun


class StepOffset:
    """Model.train(initial_epoch=e) restarts cur_step_num at 1; resumed runs add the steps done."""
    step_offset: int = 0

    def global_step(self, run_context) -> int:
        return self.step_offset + run_context.original_args().cur_step_num


def _loss_value(outputs) -> float:
    """The scalar loss from a train network's output (a Tensor, or a tuple starting with it)."""
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    return float(np.asarray(outputs.asnumpy() if hasattr(outputs, "asnumpy") else outputs).mean())


class Throughput(Callback, StepOffset):
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
                self.run.log_metrics({"train/images_per_sec": rate}, self.global_step(run_context))
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


class StepMetrics(Callback, StepOffset):
    """Per-step `train/loss` (every n steps) into the MLflow run, flushed at each epoch end."""

    def __init__(self, run: TrackedRun, every_n_steps: int = 1):
        super().__init__()
        self.run = run
        self.every = every_n_steps

    def on_train_step_end(self, run_context):
        step = self.global_step(run_context)
        if step % self.every == 0:
            self.run.log_metrics({"train/loss": _loss_value(run_context.original_args().net_outputs)}, step)

    def on_train_epoch_end(self, run_context):
        self.run.flush()


class EvalEachEpoch(Callback, StepOffset):
    """Evaluate on the test split every n epochs (and after the last); logs `eval/<metric>`,
    and `eval/<metric>_ema` with the EMA weights swapped in when `ema_swap` is given."""

    def __init__(self, model, eval_data, epochs: int, every_n_epochs: int = 1,
                 run: TrackedRun | None = None, progress: ProgressBar | None = None,
                 ema_swap: Callable[[], ContextManager] | None = None):
        super().__init__()
        self.model = model
        self.eval_data = eval_data
        self.epochs = epochs
        self.every = every_n_epochs
        self.run = run
        self.progress = progress
        self.ema_swap = ema_swap
        self.history: list[tuple[int, dict]] = []

    def evaluate(self) -> dict:
        result = {k: float(v) for k, v in self.model.eval(self.eval_data, dataset_sink_mode=False).items()}
        if self.ema_swap is not None:
            with self.ema_swap():
                ema = self.model.eval(self.eval_data, dataset_sink_mode=False)
            result.update({f"{k}_ema": float(v) for k, v in ema.items()})
        return result

    def on_train_epoch_end(self, run_context):
        epoch = run_context.original_args().cur_epoch_num
        if epoch % self.every and epoch != self.epochs:
            return
        result = self.evaluate()
        self.history.append((epoch, result))
        if self.run is not None:
            self.run.log_metrics({f"eval/{k}": v for k, v in result.items()},
                                 self.global_step(run_context), flush=True)
        if self.progress is not None and "acc" in result:
            self.progress.last_acc = result["acc"]


class BestCheckpoints(Callback):
    """Keep the `keep` best network checkpoints by an eval metric, as
    `best_<metric>_<value>_epoch_NNNN.ckpt`; `swap` puts the ranked weights (EMA) in first."""

    def __init__(self, evaluator: EvalEachEpoch, network, directory: Path, metric: str,
                 mode: str = "max", keep: int = 1, swap: Callable[[], ContextManager] | None = None):
        super().__init__()
        self.evaluator = evaluator
        self.network = network
        self.directory = Path(directory)
        self.metric = metric
        self.sign = 1.0 if mode == "max" else -1.0
        self.keep = keep
        self.swap = swap or nullcontext
        self.best: list[tuple[float, Path]] = []

    def on_train_epoch_end(self, run_context):
        if not self.evaluator.history:
            return
        epoch, result = self.evaluator.history[-1]
        if epoch != run_context.original_args().cur_epoch_num or self.metric not in result:
            return
        value = result[self.metric]
        if len(self.best) >= self.keep and self.sign * value <= self.sign * self.best[-1][0]:
            return
        path = self.directory / f"best_{self.metric}_{value:.4f}_epoch_{epoch:04d}.ckpt"
        with self.swap():
            save_atomic(self.network, path, append_dict={"epoch_num": epoch, self.metric: value})
        self.best.append((value, path))
        self.best.sort(key=lambda item: -self.sign * item[0])
        for _, doomed in self.best[self.keep:]:
            doomed.unlink(missing_ok=True)
        self.best = self.best[:self.keep]


class CheckpointEachEpoch(Callback, StepOffset):
    """Full train-network checkpoints (weights + optimizer state) every n epochs, last k kept.

    Written atomically, with `epoch_num`/`step_num` inside, as `epoch_0003.ckpt`.
    """

    def __init__(self, directory: Path, every_n_epochs: int = 1, keep_last: int = 2, integrated_save: bool = True):
        super().__init__()
        self.integrated_save = integrated_save
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
                    append_dict={"epoch_num": cb.cur_epoch_num, "step_num": self.global_step(run_context)},
                    integrated_save=self.integrated_save)
        self.saved.append(path)
        prune(self.directory, "epoch_*.ckpt", self.keep)
