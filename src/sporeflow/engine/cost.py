"""What a stage spent, in units a user can compare across arms: wall seconds split into
compile, steps, evaluation and snapshots; train-cell steps, optimizer updates, forward and
backward passes over a batch, training images seen.

`passes` is the cost in forward+backward passes of one batch: a backward pass costs about two
forward passes (its FLOPs: the gradients of activations and of weights), so a forward pass
alone counts 1/3 (`FORWARD_SHARE`). A plain step is 1 pass; a stage-2 step is 1 + 1/3 or
1 + 2/3 (the line search's trial forwards, counted in the graph by DimReduceStep).

Work that is not passes (stage 1's snapshots and the PCA stage 2 waits for) is counted by a
rule, never timed (`Overhead`): its multiply-accumulates over those of a pass, so the same
snapshots, network and settings give the same passes on any machine at any load. A pass over a
batch of B images is 3 B F multiply-accumulates (F: the network's forward MACs per image, its
Dense and Conv layers, engine.macs; a backward pass twice a forward). With N snapshots of P
weights and k components:
- a snapshot copies the P weights: P each, N P in all;
- the PCA (dim_reduce.pca) subtracts the reference snapshot in both of its passes over the
  files (2 N P), folds the N x N Gram matrix (N^2 P: an m x n by n x p product is m n p MACs,
  2 m n p flops, Golub & Van Loan, Matrix Computations, 4th ed., 1.1), centres it (two N x N
  products, 2 N^3), takes its eigenvectors (symmetric QR with the vectors, about 9 N^3 flops,
  ibid. 8.3: 4.5 N^3) and projects (k N P): N P (N + k + 2) + 6.5 N^3 in all.
A copy or a subtraction counts as one multiply-accumulate; file reads and writes count nothing
(they are what a machine's disk and load make of it). The measured seconds stay figures
(`snapshot_seconds`, the pipeline's `pca_seconds`), never part of the passes.

Seconds (this process's): `compile_seconds` is the stage's first step beyond an ordinary one
(graph compilation; the evaluation graph's compile stays in `eval_seconds`), `step_seconds`
the rest of the time between a step's start and its end (data, the step, the callbacks of a
step), less the snapshots' own `snapshot_seconds`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from sporeflow.engine.events import EventRecord
from sporeflow.engine.hooks import HookBase

FORWARD_SHARE = 1.0 / 3.0  # a forward pass alone, in forward+backward passes
PREFIX = "cost/"  # the stage run's metrics: cost/passes, cost/step_seconds, ...


@dataclass
class Cost:
    """One stage's spending (zero for a stage that trains nothing)."""

    compile_seconds: float = 0.0
    step_seconds: float = 0.0
    eval_seconds: float = 0.0
    snapshot_seconds: float = 0.0
    steps: int = 0  # train-cell calls (micro-batches)
    optimizer_steps: int = 0
    forward_passes: int = 0  # of one batch: one per step, plus stage 2's trial forwards
    backward_passes: int = 0
    images: int = 0  # training images seen (all workers)
    overhead_passes: float = 0.0  # work it waited for before its first step (Overhead.passes)

    @property
    def step_passes(self) -> float:
        """Forward+backward passes of its steps: each backward with its forward is 1, a forward
        alone 1/3."""
        extra = self.forward_passes - self.backward_passes
        return self.backward_passes + FORWARD_SHARE * extra

    @property
    def passes(self) -> float:
        """What it cost in passes: its steps' and the overhead it waited for (stage 2: stage
        1's snapshots and the PCA; 0 for every other stage)."""
        return self.step_passes + self.overhead_passes

    @property
    def seconds_per_pass(self) -> float:
        return self.step_seconds / self.step_passes if self.step_passes else math.nan

    @property
    def seconds_per_step(self) -> float:
        return self.step_seconds / self.steps if self.steps else math.nan

    def metrics(self) -> dict[str, float]:
        """As a run records them: `cost/<field>` and `cost/passes`."""
        found = {f"{PREFIX}{k}": float(v) for k, v in asdict(self).items()}
        found[f"{PREFIX}passes"] = self.passes
        return found

    @classmethod
    def from_metrics(cls, metrics: dict) -> Cost:
        """From a run's metrics (a reused stage carries the cost of the run it reused);
        missing fields are 0 (a run of an older sporeflow)."""
        found: dict[str, Any] = {}
        for f in fields(cls):
            key = f"{PREFIX}{f.name}"
            if key in metrics:
                found[f.name] = (int if f.type in (int, "int") else float)(metrics[key])
        return cls(**found)


def pass_macs(batch: int, forward_macs: int) -> int:
    """Multiply-accumulates of one pass: a forward and a backward (two forwards) over a batch."""
    return round(1 / FORWARD_SHARE) * batch * forward_macs


def snapshot_macs(n_snapshots: int, params: int) -> int:
    """N snapshots, each a copy of the P weights."""
    return n_snapshots * params


def pca_macs(n_snapshots: int, n_component: int, params: int) -> float:
    """The streaming PCA of N snapshots of P weights into k components (module docstring):
    differences 2 N P, Gram N^2 P, centring 2 N^3, eigenvectors 4.5 N^3, projection k N P."""
    n = n_snapshots
    return n * params * (n + n_component + 2) + 6.5 * n**3


@dataclass(frozen=True)
class Overhead:
    """Stage 1's snapshots and the PCA, in passes of the network by the module's rule: a pure
    function of these figures (`pca=False`: a given basis, `boost.pca_mat_path`, cost nothing)."""

    snapshots: int  # N
    n_component: int  # k
    params: int  # P: trainable weights
    forward_macs: int  # F: per image
    batch: int  # B: images per step, all workers
    pca: bool = True

    @property
    def per_pass(self) -> int:
        return pass_macs(self.batch, self.forward_macs)

    @property
    def snapshot_passes(self) -> float:
        return snapshot_macs(self.snapshots, self.params) / self.per_pass

    @property
    def pca_passes(self) -> float:
        if not self.pca:
            return 0.0
        return pca_macs(self.snapshots, self.n_component, self.params) / self.per_pass

    @property
    def passes(self) -> float:
        return self.snapshot_passes + self.pca_passes

    def tags(self) -> dict[str, str]:
        """The rule's inputs and outputs, on stage 2's and the budget arm's runs."""
        return {
            "overhead.snapshots": str(self.snapshots),
            "overhead.n_component": str(self.n_component),
            "overhead.params": str(self.params),
            "overhead.forward_macs": str(self.forward_macs),
            "overhead.batch": str(self.batch),
            "overhead.pca": str(self.pca).lower(),
            "overhead.snapshot_passes": f"{self.snapshot_passes:.4f}",
            "overhead.pca_passes": f"{self.pca_passes:.4f}",
        }


class CostMeter(HookBase):
    """Measures a stage's Cost while it trains. Counts come from the stage's global step (so a
    resumed stage counts its earlier steps) and `extra_forwards()` (stage 2's trial forwards,
    a parameter of its train cell: restored with its checkpoint) and the overhead the stage
    waited for (`overhead_passes`, by the rule); seconds are this process's.
    At each epoch end it records `cost/passes` at the global step, so every evaluation has its
    cumulative cost beside it. Runs after the snapshot callback, so a snapshot's seconds fall
    into the step that took it and are subtracted (`snapshot_seconds()`)."""

    def __init__(
        self,
        record: EventRecord,
        global_batch: int,
        accumulation_steps: int = 1,
        extra_forwards: Callable[[], float] = lambda: 0.0,
        snapshot_seconds: Callable[[], float] = lambda: 0.0,
        eval_seconds: Callable[[], float] = lambda: 0.0,
        overhead_passes: float = 0.0,
    ):
        super().__init__()
        self.overhead_passes = overhead_passes
        self.bind(record)
        self.global_batch = global_batch
        self.accumulation_steps = accumulation_steps
        self.extra_forwards = extra_forwards
        self.snapshot_seconds, self.eval_seconds = snapshot_seconds, eval_seconds
        self._step = record.steps_before
        self._start: float | None = None
        self._first: float | None = None  # the first step's seconds (compile + a step)
        self._rest = 0.0  # the other steps' seconds
        self._rest_n = 0
        self.by_epoch: dict[int, float] = {}  # epoch -> cumulative passes at its end

    def before_epoch(self, epoch: int) -> None:
        self._start = None  # evaluation and checkpoints between epochs are not steps

    def before_step(self) -> None:
        if self._start is None:
            self._start = time.perf_counter()

    def after_step(self, step: int) -> None:
        now = time.perf_counter()
        if self._start is not None:
            seconds = now - self._start
            if self._first is None:
                self._first = seconds
            else:
                self._rest += seconds
                self._rest_n += 1
        self._start = now
        self._step = step

    def after_epoch(self, epoch: int) -> None:
        passes = self.cost().passes
        self.by_epoch[epoch] = passes
        self.record.put(f"{PREFIX}passes", passes, self.record.global_step(self.cb_params))

    def cost(self) -> Cost:
        typical = self._rest / self._rest_n if self._rest_n else (self._first or 0.0)
        first = self._first or 0.0
        compile_seconds = max(0.0, first - typical)
        snapshots = self.snapshot_seconds()
        steps = self._step
        extra = int(round(self.extra_forwards()))
        return Cost(
            compile_seconds=compile_seconds,
            step_seconds=max(0.0, first + self._rest - compile_seconds - snapshots),
            eval_seconds=self.eval_seconds(),
            snapshot_seconds=snapshots,
            steps=steps,
            optimizer_steps=steps // self.accumulation_steps,
            forward_passes=steps + extra,
            backward_passes=steps,
            images=steps * self.global_batch,
            overhead_passes=self.overhead_passes,
        )


class StopAtStep(HookBase):
    """Ends a stage after `max_steps` global steps (a budget that is not whole epochs): MindSpore
    leaves the epoch there and still runs its epoch end (evaluation, checkpoint)."""

    def __init__(self, record: EventRecord, max_steps: int):
        super().__init__()
        self.bind(record)
        self.max_steps = max_steps

    def after_step(self, step: int) -> None:
        if step >= self.max_steps:
            self.stop()
