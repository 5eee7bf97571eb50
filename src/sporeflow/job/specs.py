"""The specs of a job's stages, built once from the (read-only) config: a plain job's one stage,
stage 1, stage 2, the baselines and the budget arm, each with its reuse fingerprint. Settings
are read from the typed config (job.plan's `plan.run`); `cfg` is what a fingerprint digests.

Imports no MindSpore: specs are built and tested without a network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sporeflow.config.schema import BoostConfig, RunConfig
from sporeflow.core.names import BASELINE_FINGERPRINT_TAG, STAGE1_FINGERPRINT_TAG, StageKind
from sporeflow.engine.cost import Overhead
from sporeflow.job import reuse
from sporeflow.job.budget import Budget
from sporeflow.stage.spec import FineTuneStart, ReuseKey, StageSpec


def plain_spec(run: RunConfig, run_dir: Path, start: FineTuneStart | None = None) -> StageSpec:
    """A plain job: one stage, `train`, in the run dir itself (fine-tuned from `start`)."""
    return StageSpec(
        StageKind.train,
        Path(run_dir),
        run.epochs,
        fine_tune_from=start.weights if start else None,
        tags=dict(start.tags) if start else {},
    )


def stage1_spec(
    cfg: DictConfig,
    run: RunConfig,
    run_dir: Path,
    keeps_snapshots: bool,
    provenance: dict[str, str],
    start: FineTuneStart | None = None,
) -> StageSpec:
    """Stage 1: plain training that keeps weight snapshots (on the worker that writes them),
    fine-tuned from `start` when train.init_from names a run."""
    stage_dir = Path(run_dir) / StageKind.stage1
    return StageSpec(
        StageKind.stage1,
        stage_dir,
        run.epochs,
        fine_tune_from=start.weights if start else None,
        tags=dict(start.tags) if start else {},
        snapshot_dir=stage_dir / "snapshots" if keeps_snapshots else None,
        reuse=ReuseKey(
            STAGE1_FINGERPRINT_TAG,
            reuse.stage1_fingerprint(cfg, provenance),
            reuse.stage1_config(cfg),
        ),
        provenance=provenance,
    )


def stage2_spec(
    boost: BoostConfig,
    run_dir: Path,
    start: Path,
    basis: Any,
    basis_path: Path,
    n_snapshots: int,
    overhead: Overhead,
) -> StageSpec:
    """Stage 2: boost.epochs of dimension-reduced steps in the PCA basis, from `start`; its
    cost/passes include stage 1's snapshots and the PCA (`overhead`, by engine.cost's rule)."""
    return StageSpec(
        StageKind.stage2,
        Path(run_dir) / StageKind.stage2,
        boost.epochs,
        init_weights=start,
        basis=basis,
        tags={
            "pca_basis": str(basis_path),
            "n_snapshots": str(n_snapshots),
            "start_from": boost.start_from.value,
            **overhead.tags(),
        },
        overhead_passes=overhead.passes,
    )


def baseline_spec(
    cfg: DictConfig,
    run: RunConfig,
    run_dir: Path,
    name: str,
    stage1_weights: Path,
    provenance: dict[str, str],
) -> StageSpec:
    """A baseline stage 2 must beat: plain continuation (`baseline`), the same at a lower rate
    (`annealed`), or the snapshots' mean evaluated without training (`snapshot_mean`)."""
    boost = run.boost
    budget = boost.baseline_epochs or boost.epochs
    fingerprinted = reuse.baseline_budget(boost, name)
    key = ReuseKey(
        BASELINE_FINGERPRINT_TAG,
        reuse.baseline_fingerprint(cfg, name, provenance, fingerprinted),
        reuse.baseline_config(reuse.stage1_config(cfg), name, fingerprinted),
    )
    lr = run.optimizer["lr"] * boost.anneal_factor if name == StageKind.annealed else None
    return StageSpec(
        name,
        Path(run_dir) / name,
        0 if name == StageKind.snapshot_mean else budget,
        lr=lr,
        init_weights=stage1_weights,
        reuse=key,
        provenance=provenance,
    )


def budget_spec(
    cfg: DictConfig,
    run_dir: Path,
    stage1_weights: Path,
    provenance: dict[str, str],
    budget: Budget,
) -> StageSpec:
    """The budget arm: plain training continued from stage 1's final weights for what stage 2
    spent (`budget.steps`), the rate decayed linearly from optimizer.lr to zero over exactly
    those steps (Budgeted Training); reused like a baseline when its budget is the same."""
    schedule = {
        "name": "linear",
        "warmup_epochs": 0,
        "lr_init": 0.0,
        "lr_end": 0.0,
        "total_steps": budget.steps,
    }
    return StageSpec(
        StageKind.budget,
        Path(run_dir) / StageKind.budget,
        budget.epochs,
        init_weights=stage1_weights,
        reuse=ReuseKey(
            BASELINE_FINGERPRINT_TAG,
            reuse.budget_fingerprint(cfg, budget.steps, provenance),
            reuse.baseline_config(
                reuse.stage1_config(cfg), StageKind.budget, {"steps": budget.steps}
            ),
        ),
        provenance=provenance,
        tags=budget.tags(),
        max_steps=budget.steps,
        schedule=schedule,
    )
