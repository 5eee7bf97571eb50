"""sporeflow's own hooks (engine.hooks.HookBase) a stage composes: they measure into the stage's
EventRecord, or act on it.

Metric names: `train/loss`, `train/lr`, `val/<metric>` (and `val/<metric>_ema`),
`train/images_per_sec`, with step = the stage's global step. Nothing here talks to MLflow: the stage's writer sends
the record there (rank 0). Order matters within a step and an epoch end: measuring callbacks
come before those that read what was measured (`stage.hooks.stage_hooks` builds the list).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import psutil
from mindspore import Parameter, Tensor, nn
from mindspore import dtype as mstype
from mindspore.train import Callback
from tqdm import tqdm

from sporeflow.core import console, signals
from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase, write_hooks_state
from sporeflow.storage.checkpoints import checkpoint_files, prune, save_atomic


def loss_value(outputs) -> float:
    """The scalar loss from a train network's output (a Tensor, or a tuple starting with it)."""
    if isinstance(outputs, (tuple, list)):
        outputs = outputs[0]
    return float(np.asarray(outputs.asnumpy() if hasattr(outputs, "asnumpy") else outputs).mean())


def seconds_since_process_start() -> float:
    return time.time() - psutil.Process().create_time()


class Throughput(HookBase):
    """Images per second per epoch, measured between step ends (so graph compilation in the
    first step of a stage is left out), recorded as `train/images_per_sec`; and once, at the
    stage's first step end, `train/seconds_to_first_step` since the process started (start-up:
    imports, config, data, graph compilation, for the first stage of a process).

    An epoch of one step (a training split of one batch) has no interval between step ends: it
    is timed from the epoch's start to its step's end instead (its batch's loading included,
    as between step ends), unless that step is the stage's first (compilation). A stage with
    no timed step (one epoch of one step) has no rate: `mean` is NaN, which says "unknown",
    not "no step ran" (the stage's cost counts its steps)."""

    def __init__(self, record: EventRecord, batch_size: int):
        super().__init__()
        self.bind(record)
        self.batch_size = batch_size
        self.history: list[float] = []
        self._last: float | None = None
        self._images = 0
        self._seconds = 0.0
        self._started = False
        self._epoch_start = 0.0
        self._lone_seconds = 0.0  # an epoch's first step, from the epoch's start (not compiling)

    def before_epoch(self, epoch: int) -> None:
        self._last = None  # time spent in eval/checkpoints between epochs is not training
        self._epoch_start = time.perf_counter()

    def after_step(self, step: int) -> None:
        now = time.perf_counter()
        if not self._started:
            self._started = True
            self.record.put("train/seconds_to_first_step", seconds_since_process_start(), step)
        elif self._last is None:
            self._lone_seconds = now - self._epoch_start
        if self._last is not None:
            self._images += self.batch_size
            self._seconds += now - self._last
        self._last = now

    def after_epoch(self, epoch: int) -> None:
        images, seconds = self._images, self._seconds
        if seconds <= 0 and self._lone_seconds > 0:  # one step this epoch
            images, seconds = self.batch_size, self._lone_seconds
        if seconds > 0:
            rate = images / seconds
            self.history.append(rate)
            self.record.put("train/images_per_sec", rate, self.record.global_step(self.cb_params))
        self._images, self._seconds, self._lone_seconds = 0, 0.0, 0.0

    @property
    def mean(self) -> float:
        """The mean of the epochs' rates; NaN when no step was timed (none ran, or only the
        stage's first, compiling one)."""
        return float(np.mean(self.history)) if self.history else float("nan")


class StepLoss(HookBase):
    """The training loss every n steps, recorded as `train/loss` (one host read per n steps)."""

    def __init__(self, record: EventRecord, every_n_steps: int = 1):
        super().__init__()
        self.bind(record)
        self.every = every_n_steps

    def after_step(self, step: int) -> None:
        if step % self.every == 0:
            self.record.put("train/loss", loss_value(self.cb_params.net_outputs), step)


LR_METRIC = "train/lr"


def optimizer_in(cells) -> nn.Optimizer | None:
    """The optimizer among `cells` (a stage's state cells) or their children, if any."""
    for cell in cells:
        if isinstance(cell, nn.Optimizer):
            return cell
        for _, child in cell.cells_and_names():
            if isinstance(child, nn.Optimizer):
                return child
    return None


def rate_used(optimizer: nn.Optimizer) -> float | None:
    """The learning rate `optimizer`'s last update used; None before its first update.

    MindSpore's optimizers read their rate at `global_step` and then add 1 to it, once per
    update (with gradient accumulation, once per `accumulation_steps` micro-steps; restored
    from the checkpoint on a resume), so the last update read entry `global_step - 1`: of the
    per-update array (nn.optimizers.schedule_of, padded with its last value), of a
    LearningRateSchedule cell, or the one fixed rate. Parameter groups with rates of their own
    report the first group's (sporeflow's groups share one rate)."""
    updates = int(np.asarray(optimizer.global_step.asnumpy()).reshape(-1)[0])
    if updates <= 0:
        return None
    rate = optimizer.learning_rate
    if optimizer.is_group_lr:
        rate = rate[0]
    if not optimizer.dynamic_lr:
        return float(np.asarray(rate.asnumpy()).reshape(-1)[0])
    table = getattr(rate, "learning_rate", None)  # MindSpore's cell around a per-step array
    if isinstance(table, Parameter) and len(table.shape) == 1:
        rates = table.asnumpy()
        return float(rates[min(updates - 1, len(rates) - 1)])
    value = rate(Tensor([updates - 1], mstype.int32))  # a LearningRateSchedule of the user's
    return float(np.asarray(value.asnumpy()).reshape(-1)[0])


class LearningRate(HookBase):
    """The learning rate at every epoch's end, recorded as `train/lr` at the stage's global
    step: the value the epoch's last update used (`rate()`, e.g. `rate_used` of the stage's
    optimizer; None before any update, which records nothing), as Lightning's
    LearningRateMonitor logs it: a schedule's warm-up and decay, a budget arm's decay to zero
    and stage 2's rate show on the charts. One host read per epoch."""

    def __init__(self, record: EventRecord, rate: Callable[[], float | None]):
        super().__init__()
        self.bind(record)
        self.rate = rate

    def after_epoch(self, epoch: int) -> None:
        value = self.rate()
        if value is not None:
            self.record.put(LR_METRIC, value, self.record.global_step(self.cb_params))


class EvalEachEpoch(HookBase):
    """Evaluate on the validation split every n epochs (and after the last), into the record as
    `val/<metric>`, and `val/<metric>_ema` with the EMA weights swapped in when `ema_swap` is
    given: what best-k, early stopping, the pruner and the progress bar read."""

    def __init__(
        self,
        record: EventRecord,
        model,
        eval_data,
        every_n_epochs: int = 1,
        ema_swap: Callable[[], AbstractContextManager] | None = None,
        shown: bool | None = False,
    ):
        """`shown`: a bar over the evaluation's batches, as ProgressBar's `shown`."""
        super().__init__()
        self.bind(record)
        self.model = model
        self.eval_data = eval_data
        self.every = every_n_epochs
        self.ema_swap = ema_swap
        self.shown = shown
        self.seconds = 0.0  # spent evaluating (its graph's compile included): engine.cost

    def evaluate(self) -> dict:
        started = time.perf_counter()
        try:
            return self._evaluate()
        finally:
            self.seconds += time.perf_counter() - started

    def _evaluate(self) -> dict:
        result = {k: float(v) for k, v in self._eval("val").items()}
        if self.ema_swap is not None:
            with self.ema_swap():
                ema = self._eval("val ema")
            result.update({f"{k}_ema": float(v) for k, v in ema.items()})
        return result

    def _eval(self, desc: str) -> dict:
        with EvalBar(self.eval_data.get_dataset_size(), desc, self.shown) as bar:
            return self.model.eval(self.eval_data, callbacks=[bar], dataset_sink_mode=False)

    def after_epoch(self, epoch: int) -> None:
        if epoch % self.every and epoch != self.record.epochs:
            return
        self.record.put_eval(epoch, self.record.global_step(self.cb_params), self.evaluate())


class EvalBar(Callback):
    """A bar over one evaluation's batches, removed when it ends: a large split's evaluation
    otherwise shows nothing for a minute."""

    def __init__(self, batches: int, desc: str, shown: bool | None):
        super().__init__()
        options = console.bar_options(shown)
        self.bar = tqdm(total=batches, desc=desc, unit="batch", leave=False, **options)

    def on_eval_step_end(self, run_context) -> None:
        self.bar.update(1)

    def __exit__(self, *exc) -> None:
        self.bar.close()


class ProgressBar(HookBase):
    """One tqdm bar over the stage's steps (a resumed stage starts part-way), with the epoch,
    the latest recorded loss and the latest validation accuracy (refreshed right after each eval)."""

    def __init__(self, record: EventRecord, stage: str, shown: bool | None = None):
        """`shown`: None draws the bar when the process's real stderr is a terminal
        (core.console; a log file or pipe gets no bar lines), True always."""
        super().__init__()
        self.bind(record)
        self.bar = tqdm(
            total=record.epochs * record.steps_per_epoch,
            initial=record.steps_before,
            desc=stage,
            unit="step",
            mininterval=0.5,
            **console.bar_options(shown),
        )

    def _show(self, epoch: int, refresh: bool) -> None:
        post = {"epoch": f"{epoch}/{self.record.epochs}"}
        loss = self.record.latest("train/loss")
        if loss is not None:
            post["loss"] = f"{loss:.4f}"
        acc = self.record.latest("val/acc")
        if acc is not None:
            post["val_acc"] = f"{acc:.4f}"
        self.bar.set_postfix(post, refresh=refresh)

    def after_step(self, step: int) -> None:
        self._show(self.cb_params.cur_epoch_num, refresh=False)
        self.bar.update(1)

    def after_epoch(self, epoch: int) -> None:
        self._show(epoch, refresh=True)

    def after_train(self) -> None:
        """End the bar's line (when training raised too, before its error is printed)."""
        self.bar.close()


class BestCheckpoints(HookBase):
    """Keep the `keep` best network checkpoints by a recorded eval metric, as
    `best_<metric>_<value>_epoch_NNNN.<fmt>`; `swap` puts the ranked weights (EMA) in first."""

    def __init__(
        self,
        record: EventRecord,
        network,
        directory: Path,
        metric: str,
        mode: str = "max",
        keep: int = 1,
        swap: Callable[[], AbstractContextManager] | None = None,
        fmt: str = "ckpt",
    ):
        super().__init__()
        self.bind(record)
        self.network = network
        self.fmt = fmt
        self.directory = Path(directory)
        self.metric = metric
        self.sign = 1.0 if mode == "max" else -1.0
        self.keep = keep
        self.swap = swap or nullcontext
        self.best: list[tuple[float, Path]] = self._kept()

    def _kept(self) -> list[tuple[float, Path]]:
        """The best checkpoints an earlier part of this run left (a resume goes on ranking them)."""
        pattern = re.compile(rf"best_{re.escape(self.metric)}_(-?[0-9.]+)_epoch_\d+\.\w+")
        found = []
        for path in checkpoint_files(self.directory, f"best_{self.metric}_*_epoch_*"):
            match = pattern.fullmatch(path.name)
            if match:
                found.append((float(match.group(1)), path))
        return sorted(found, key=lambda item: -self.sign * item[0])[: self.keep]

    def after_epoch(self, epoch: int) -> None:
        latest = self.record.latest_eval()
        if latest is None or latest[0] != epoch or self.metric not in latest[1]:
            return
        value = latest[1][self.metric]
        if len(self.best) >= self.keep and self.sign * value <= self.sign * self.best[-1][0]:
            return
        path = self.directory / f"best_{self.metric}_{value:.4f}_epoch_{epoch:04d}.{self.fmt}"
        with self.swap():
            save_atomic(self.network, path, append_dict={"epoch_num": epoch, self.metric: value})
        self.best.append((value, path))
        self.best.sort(key=lambda item: -self.sign * item[0])
        for _, doomed in self.best[self.keep :]:
            doomed.unlink(missing_ok=True)
        self.best = self.best[: self.keep]


class CheckpointEachEpoch(HookBase):
    """Full train-network checkpoints (weights + optimizer state) every n epochs, last k kept.

    Written atomically, with `epoch_num`/`step_num` inside, as `epoch_0003.<fmt>`; the stage's
    hooks' state beside it (`epoch_0003.hooks.json`, written first), so a resume from that
    checkpoint gives every hook back what it knew then. A stop mid-epoch (a requeue) writes
    `epoch_0003_step_00000150.<fmt>` (after epoch 3's, before epoch 4's by name), which also
    holds `epoch_step`, the batches of epoch 4 already trained on. `state()`: what the stage's
    hooks remember (stage.trainer.Trainer.state_dict), written when it is not empty.
    """

    def __init__(
        self,
        record: EventRecord,
        directory: Path,
        every_n_epochs: int = 1,
        keep_last: int = 2,
        integrated_save: bool = True,
        state: Callable[[], dict] = dict,
        fmt: str = "ckpt",
    ):
        super().__init__()
        self.bind(record)
        self.fmt = fmt
        self.directory = Path(directory)
        self.every = every_n_epochs
        self.keep = keep_last
        self.integrated_save = integrated_save
        self.state = state  # the hooks' state at this step (Trainer.state_dict): saved beside

    def save(self, cb, epoch_step: int = 0) -> Path:
        """The full checkpoint of the step `cb` is at: after `cb.cur_epoch_num` when
        `epoch_step` is 0, else `epoch_step` batches into it."""
        done = cb.cur_epoch_num - 1 if epoch_step else cb.cur_epoch_num
        step = self.record.global_step(cb)
        stem = f"epoch_{done:04d}" + (f"_step_{step:08d}" if epoch_step else "")
        path = self.directory / f"{stem}.{self.fmt}"
        state = self.state()
        if state:
            write_hooks_state(path, state)
        save_atomic(
            cb.train_network,
            path,
            append_dict={"epoch_num": done, "step_num": step, "epoch_step": epoch_step},
            integrated_save=self.integrated_save,
        )
        prune(checkpoint_files(self.directory, "epoch_*"), self.keep)
        prune(sorted(self.directory.glob("epoch_*.hooks.json")), self.keep)
        return path

    def after_epoch(self, epoch: int) -> None:
        if epoch % self.every == 0:
            self.save(self.cb_params)


class RequeueAtSignal(HookBase):
    """Stops a stage for a requeue once it was asked (core.signals.requeue_on: SLURM's warning
    before the time limit) at the next step where nothing is half done (not inside a gradient
    accumulation): the record written (`flush`), a full checkpoint of that step (`save`), then
    `Requeued`. At an epoch's last step it waits for the epoch's end (evaluation, checkpoint).
    Runs last among a stage's callbacks; the last epoch's end just finishes the stage.
    `agree(asked)`: whether any rank of the job was asked (runtime.mindspore_context.any_rank),
    called by every rank at every step end while a requeue is armed, so all stop at one step."""

    def __init__(
        self,
        record: EventRecord,
        save: Callable[[Any, int], Path],
        every_n_epochs: int = 1,
        accumulation_steps: int = 1,
        flush: Sequence[Callable[[], None]] = (),
        agree: Callable[[bool], bool] = bool,
    ):
        super().__init__()
        self.bind(record)
        self.save = save  # the stage's full checkpoint of a step (Trainer.save_checkpoint)
        self.every = every_n_epochs  # epoch ends that already wrote one
        self.accumulation_steps = accumulation_steps
        self.flush = list(flush)
        self.agree = agree
        self.wanted = False  # the ranks agreed to stop at the next boundary they can

    def _stop(self, cb, epoch_step: int) -> None:
        for write in self.flush:
            write()
        if epoch_step or cb.cur_epoch_num % self.every:  # not saved at this end yet
            self.save(cb, epoch_step)
        signals.raise_requeued()

    def _asked(self) -> bool:
        if signals.requeue_armed() and not self.wanted:
            self.wanted = self.agree(signals.requeue_asked())
        return self.wanted

    def after_step(self, step: int) -> None:
        if not self._asked():
            return
        in_epoch = self.record.step_in_epoch(self.cb_params)
        if in_epoch < self.record.steps_per_epoch and step % self.accumulation_steps == 0:
            self._stop(self.cb_params, in_epoch)

    def after_epoch(self, epoch: int) -> None:
        if self._asked() and epoch < self.record.epochs:
            self._stop(self.cb_params, 0)
