"""Hooks: everything that runs around a stage's train loop, sporeflow's own and a user's, of one
kind (detectron2's `HookBase` shape on MindSpore's callback protocol). A hook is told before
and after training, before and after each epoch, before and after each step (`after_train`
also when training raised: `self.failure` says why); it reads the stage's `EventRecord` (what
was measured) and MindSpore's callback parameters of the call (`self.cb_params`), and may ask
the stage to stop. `state_dict` / `load_state_dict` carry what it must remember across a
resume: the stage saves every user hook's state beside each epoch checkpoint and gives it back
when the stage resumes from that checkpoint.

sporeflow's own hooks (engine.callbacks, engine.cost, engine.divergence, the MLflow writer, the
pruner's reporter) run in named phases, in this order (stage.hooks): `guard` (stop
before anything sees diverged weights), `measure` (snapshots, cost, throughput, loss, learning
rate, eval), `record` (journalled to MLflow), `checkpoints`, `pruning`, `progress`, and last
the stop for a SLURM requeue. A user's hook runs right after the phase its `place` names (`measure` by
default: it reads what was measured, and what it remembers is saved with the epoch's
checkpoint). A user adds one with a class and a yaml entry under `callbacks.hooks` (a
`_target_` node): no edit of sporeflow. `EarlyStopping` below is the example.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from mindspore.train import Callback

from sporeflow.core.ranges import Count, NonNegative, ValidationMetric
from sporeflow.engine.events import EventRecord
from sporeflow.storage.files import write_text_atomic

log = logging.getLogger(__name__)

# where a user's hook may run: right after one of these phases of the stage's own hooks (all
# before the epoch's checkpoint, which holds what each user hook remembers)
PLACES = ("guard", "measure", "record")


class HookBase(Callback):
    """Override what you need; `self.record` is the stage's record, `self.stop()` ends training
    after the current step or epoch (the stage then exports what it has). `place`: after which
    of sporeflow's phases the hook runs (PLACES)."""

    place: ClassVar[str] = "measure"
    record: EventRecord
    failure: BaseException | None = None  # in after_train: what ended training, if it raised
    cb_params: Any = None  # MindSpore's callback parameters of the current call
    _stop_requested = False  # (bind resets these: a hook that needs no record works unbound)
    _ended = False

    def bind(self, record: EventRecord) -> HookBase:
        self.record = record
        self._stop_requested = False
        self._ended = False
        self.failure = None
        return self

    def stop(self) -> None:
        self._stop_requested = True

    def before_train(self) -> None: ...

    def after_train(self) -> None: ...

    def before_epoch(self, epoch: int) -> None: ...

    def after_epoch(self, epoch: int) -> None: ...

    def before_step(self) -> None: ...

    def after_step(self, step: int) -> None: ...

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None: ...

    # MindSpore's callback protocol, mapped onto the hook's methods
    def _called(self, run_context) -> Any:
        self.cb_params = run_context.original_args()
        return self.cb_params

    def on_train_begin(self, run_context):
        self._called(run_context)
        self.before_train()

    def on_train_end(self, run_context):
        self._called(run_context)
        self._ended = True
        self.after_train()

    def training_raised(self, failure: BaseException) -> None:
        """The fit loop's word that training raised (diverged, interrupted, a bug), where
        MindSpore calls no `on_train_end`: `after_train` runs all the same, with `self.failure`
        set, so a hook releases what it holds. What it raises itself is logged, not raised over
        the failure."""
        if self._ended:
            return
        self._ended, self.failure = True, failure
        try:
            self.after_train()
        except Exception:
            log.exception(
                "hook %s failed in after_train after training raised", type(self).__name__
            )

    def on_train_epoch_begin(self, run_context):
        self.before_epoch(self._called(run_context).cur_epoch_num + 1)

    def on_train_epoch_end(self, run_context):
        self.after_epoch(self._called(run_context).cur_epoch_num)
        self._stop_if_asked(run_context)

    def on_train_step_begin(self, run_context):
        self._called(run_context)
        self.before_step()

    def on_train_step_end(self, run_context):
        self.after_step(self.record.global_step(self._called(run_context)))
        self._stop_if_asked(run_context)

    def _stop_if_asked(self, run_context) -> None:
        if self._stop_requested:
            run_context.request_stop()


class EarlyStopping(HookBase):
    """Stop a stage when `monitor` has not improved by more than `min_delta` for `patience`
    evaluations in a row. `monitor`: a metric the stage records on the validation split
    (`val/acc`, `val/loss`, and `val/acc_ema`, `val/loss_ema` with EMA weights; `acc` stands
    for `val/acc`); `mode`: `max` (higher is better) or `min`. Both are checked against these
    allowed values before any work (config.validation)."""

    def __init__(
        self,
        monitor: Annotated[str, ValidationMetric] = "val/acc",
        patience: Annotated[int, Count] = 3,
        mode: Literal["max", "min"] = "max",
        min_delta: Annotated[float, NonNegative] = 0.0,
    ):
        super().__init__()
        if mode not in ("max", "min"):  # built in Python, not from a checked config
            raise ValueError(f"mode={mode!r}; allowed: max, min")
        self.monitor = monitor.removeprefix("val/")  # the record's evaluations name it so
        self.patience, self.min_delta = patience, min_delta
        self.sign = 1.0 if mode == "max" else -1.0
        self.best: float | None = None
        self.bad_evals = 0
        self.last_seen = 0  # the epoch of the last evaluation counted

    def after_epoch(self, epoch: int) -> None:
        latest = self.record.latest_eval()
        if latest is None or latest[0] != epoch or self.monitor not in latest[1]:
            return
        value = self.sign * float(latest[1][self.monitor])
        self.last_seen = epoch
        if self.best is None or value > self.best + self.min_delta:
            self.best, self.bad_evals = value, 0
            return
        self.bad_evals += 1
        if self.bad_evals >= self.patience:
            log.info(
                "early stopping after epoch %d: validation %s did not improve for %d evaluations",
                epoch,
                self.monitor,
                self.bad_evals,
            )
            self.stop()

    def state_dict(self) -> dict:
        return {"best": self.best, "bad_evals": self.bad_evals, "last_seen": self.last_seen}

    def load_state_dict(self, state: dict) -> None:
        self.best = state.get("best")
        self.bad_evals = int(state.get("bad_evals", 0))
        self.last_seen = int(state.get("last_seen", 0))


def hooks_state_path(checkpoint: Path) -> Path:
    """`epoch_0003.ckpt` -> `epoch_0003.hooks.json`: the hooks' state at that checkpoint."""
    return Path(checkpoint).with_suffix(".hooks.json")


def hooks_state(hooks: list[HookBase]) -> dict:
    """Every hook's `state_dict`, keyed by its place in the list and its class."""
    return {f"{i}:{type(h).__qualname__}": h.state_dict() for i, h in enumerate(hooks)}


def write_hooks_state(checkpoint: Path, state: dict) -> None:
    """Written before the checkpoint itself: a checkpoint never exists without its hooks' state."""
    write_text_atomic(hooks_state_path(checkpoint), json.dumps(state, sort_keys=True))


def read_hooks_state(checkpoint: Path) -> dict:
    """The hooks' state saved with `checkpoint` ({} when none was saved)."""
    path = hooks_state_path(checkpoint)
    return json.loads(path.read_text()) if path.is_file() else {}


def restore_hooks_state(hooks: list[HookBase], saved: dict) -> None:
    """Give each hook its entry of `saved` (hooks_state's keys); a hook without one starts fresh."""
    for i, hook in enumerate(hooks):
        state = saved.get(f"{i}:{type(hook).__qualname__}")
        if state is not None:
            hook.load_state_dict(state)


def save_hooks_state(checkpoint: Path, hooks: list[HookBase]) -> None:
    write_hooks_state(checkpoint, hooks_state(hooks))


def load_hooks_state(checkpoint: Path, hooks: list[HookBase]) -> None:
    """Give each hook the state saved with `checkpoint` (none saved: hooks start fresh)."""
    restore_hooks_state(hooks, read_hooks_state(checkpoint))
