"""A stage is a value: what to train, from which weights, for how long, at which learning
rate, under which reuse fingerprint. A pipeline builds its specs once from the (read-only)
config (job.specs); nothing rewrites the config between stages, so `epochs` always means
stage 1's epochs and `optimizer.lr` the configured rate, and a spec says what its stage
differs in.

Imports no MindSpore: specs are built and tested without a network."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sporeflow.config.schema import RunConfig
from sporeflow.core.names import FINGERPRINT_CONFIG_TAG, RUN_DIR_TAG
from sporeflow.stage import provenance as made_with


@dataclass(frozen=True)
class ReuseKey:
    """Under which tag a reusable stage's fingerprint is stored, the fingerprint (its config
    and provenance) and its config part alone (to say why a same-config run is not reused)."""

    tag: str  # core.names.STAGE1_FINGERPRINT_TAG or BASELINE_FINGERPRINT_TAG
    fingerprint: str
    config_digest: str

    @property
    def config_tag(self) -> str:
        return FINGERPRINT_CONFIG_TAG.format(self.tag.removesuffix("_fingerprint"))

    def tags(self) -> dict[str, str]:
        return {self.tag: self.fingerprint, self.config_tag: self.config_digest}


@dataclass(frozen=True)
class StageSpec:
    """One stage of a job: its MLflow run is named `name`, its files live in `stage_dir`."""

    name: str  # train | stage1 | stage2 | baseline | annealed | budget | snapshot_mean
    stage_dir: Path
    epochs: int  # epochs of this stage (0: evaluated, not trained)
    lr: float | None = None  # None: optimizer.lr as configured
    init_weights: Path | None = None  # network weights to start from (stage 1's final.ckpt)
    fine_tune_from: Path | None = None  # weights loaded where they fit (train.init_from)
    basis: Any = None  # k x M PCA basis: train with DimReduceStep
    snapshot_dir: Path | None = None  # keep weight snapshots here (boost.snapshot)
    reuse: ReuseKey | None = None  # None: the stage is never reused (stage 2, a plain run)
    provenance: dict = field(default_factory=dict)  # code, MindSpore and data it is made with
    tags: dict = field(default_factory=dict)  # more tags on the stage's run
    max_steps: int | None = None  # stop after this many steps (a budget that is not epochs)
    schedule: dict | None = None  # replaces optimizer.schedule (the budget arm's decay)
    overhead_passes: float = 0.0  # waited for before its first step: in its cost/passes

    def params(self, run: RunConfig) -> dict:
        """What this stage's run records where it differs from the (typed) config: its own
        epochs and learning rate (stage 2 trains boost.epochs, the annealed baseline a lower
        rate)."""
        changed: dict[str, Any] = {}
        if self.epochs != run.epochs:
            changed["epochs"] = self.epochs
        if self.lr is not None and self.lr != run.optimizer["lr"]:
            changed["optimizer.lr"] = self.lr
        if self.max_steps is not None:
            changed["max_steps"] = self.max_steps
        if self.schedule is not None:
            changed.update({f"optimizer.schedule.{k}": v for k, v in self.schedule.items()})
        return changed

    def run_tags(self) -> dict:
        reuse_tags: dict[str, Any] = {}
        if self.reuse is not None:
            reuse_tags = {**self.reuse.tags(), **made_with.tags(self.provenance)}
        return {RUN_DIR_TAG: str(self.stage_dir), **reuse_tags, **self.tags}


@dataclass(frozen=True)
class FineTuneStart:
    """train.init_from resolved: the weights a first stage loads where they fit, and the tags
    that record them on its run (stage.fine_tune)."""

    weights: Path
    tags: dict
