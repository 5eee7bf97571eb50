"""The dim-reduce pipeline: stage 1 -> PCA -> stage 2 -> baselines -> comparison, under one
parent MLflow run whose children are the stages.

stage1:   plain training keeping weight snapshots; reused when a finished one has the same
          fingerprint (or `boost.stage1_run` names one);
stage2:   the PCA basis of the snapshots, then dimension-reduced steps (DimReduceStep);
baselines: plain continuation, annealed continuation, snapshot mean - what stage 2 must beat;
          each reused like stage 1 (stages.reuse), so a stage-2 sweep trains it once.
The pipeline run also carries every stage's per-epoch eval accuracy on one epoch axis
(`curve/<stage>`), reused stages included, so each job shows stage 1 -> stage 2 by itself.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from sporeflow.config.components import build_dataset, build_model
from sporeflow.config.schema import StartFrom
from sporeflow.core.context import RunContext
from sporeflow.dim_reduce.pca import (
    Layout,
    check_count,
    check_npy_layout,
    load_or_compute_basis,
    snapshot_mean,
)
from sporeflow.dim_reduce.snapshots import DimReduceError, list_snapshots
from sporeflow.report.comparison import (
    best_baseline,
    comparison_plot,
    gain,
    paired_lines,
    summary_table,
)
from sporeflow.report.paired import compare_paired
from sporeflow.report.sweep_report import CURVE_PREFIX
from sporeflow.runtime.mindspore_context import Worker, barrier
from sporeflow.stages import reuse
from sporeflow.stages.build import StagePlan
from sporeflow.stages.outputs import record_data
from sporeflow.stages.runs import guarded, record_config, start_job_run
from sporeflow.stages.stage import (
    StageResult,
    evaluate_weights,
    load_predictions,
    network_with,
    tracked_stage,
)
from sporeflow.storage.checkpoints import final_weights, save_atomic
from sporeflow.storage.run_marker import write_run_marker
from sporeflow.tracking.tracker import Tracker

log = logging.getLogger(__name__)

MAX_BASIS_ARTIFACT_MB = 100


@dataclass
class Stage1:
    run_dir: Path
    metrics: dict
    reused_from: str | None = None
    rank: int = 0
    run_id: str | None = None

    @property
    def weights(self) -> Path:
        return final_weights(self.run_dir, self.rank)

    @property
    def snapshots(self) -> Path:
        return self.run_dir / "snapshots"


class DimReducePipeline:
    """stage 1 -> PCA -> stage 2 -> baselines -> comparison, under one parent MLflow run."""

    def __init__(
        self, cfg: DictConfig, ctx: RunContext, tracker: Tracker, worker: Worker = Worker()
    ):
        self.cfg, self.ctx, self.tracker, self.worker = cfg, ctx, tracker, worker
        self.boost = cfg.boost
        self.results: dict[str, dict] = {}
        self.batching: dict[
            str, str
        ] = {}  # stage -> "2 workers x batch 16 = global batch 32, N updates"
        self.correct: dict[str, np.ndarray] = {}  # stage -> right/wrong per eval image
        self.curves: dict[str, list] = {}  # stage -> [(epoch, {"acc": ...})] of that stage
        self._snapshot_mean_weights: dict | None = None
        self.pca_seconds: float | None = None  # None: the basis was given or found cached

    def _derived(self, **updates) -> DictConfig:
        derived = self.cfg.copy()
        for key, value in updates.items():
            OmegaConf.update(derived, key, value, merge=False)
        return derived

    def run(self) -> dict[str, float]:
        """The pipeline's comparison metrics (`stage2/acc`, `gain`, ...), as its run records them."""
        self.parent = start_job_run(self.tracker, self.cfg, self.ctx, "pipeline")
        if self.worker.is_main:
            write_run_marker(
                self.ctx.run_dir,
                mlflow_run_id=self.parent.run_id,
                tracking_uri=self.tracker.uri,
                stage="pipeline",
            )
            # the pipeline's run shows what its stages saw and (at the end) stage 2's model
            record_data(self.parent, build_dataset(self.cfg))
        return guarded(self.parent, self._stages)

    def _stages(self) -> dict[str, float]:
        stage1 = self._stage1()
        self.results["stage1"] = stage1.metrics
        if "stage1" not in self.correct:  # reused: its file, when it has one
            reused = load_predictions(stage1.run_dir)
            if reused is not None:
                self.correct["stage1"] = reused
        barrier(self.worker)  # rank 0 has written every snapshot
        snapshots = list_snapshots(stage1.snapshots)
        if self.boost.pca_mat_path is None:
            check_count(len(snapshots), self.boost.n_component)
        layout = Layout.of(build_model(self.cfg))
        if snapshots[0].suffix == ".npy":
            check_npy_layout(stage1.snapshots, layout)
        pca_dir = stage1.run_dir / "pca"
        existed = set(pca_dir.glob("*.npy")) if self.worker.is_node_main else set()
        compute = lambda: load_or_compute_basis(  # noqa: E731
            snapshots,
            layout,
            self.boost.n_component,
            pca_dir,
            self.boost.pca_mat_path,
            self.boost.pca_chunk_mb,
            progress=self.cfg.callbacks.progress_bar and self.worker.is_main,
        )
        if (
            self.worker.is_node_main
        ):  # one worker per node computes (or finds) the basis, its node reads it
            started = time.perf_counter()
            basis, basis_path = compute()
            if basis_path not in existed:
                self.pca_seconds = time.perf_counter() - started
        barrier(self.worker)
        if not self.worker.is_node_main:
            basis, basis_path = compute()
        log.info("PCA basis %s from %d snapshots: %s", basis.shape, len(snapshots), basis_path)
        self._store_basis_once(stage1, basis_path, new=basis_path not in existed)

        stage2 = self._child(
            "stage2",
            self._derived(epochs=self.boost.epochs),
            StagePlan(
                init_weights=self._stage2_start(stage1, snapshots, layout), basis=np.asarray(basis)
            ),
            {
                "pca_basis": str(basis_path),
                "n_snapshots": str(len(snapshots)),
                "start_from": self.boost.start_from.value,
            },
        )
        self.results["stage2"] = stage2.metrics
        stage1_fp = reuse.stage1_fingerprint(self.cfg)
        for name in (b.value for b in self.boost.baselines):
            fingerprint = reuse.baseline_fingerprint(self.cfg, stage1_fp, name)
            with reuse.turn(
                self.ctx.launch_dir,
                self.worker,
                fingerprint,
                name,
                self.tracker,
                "baseline_fingerprint",
            ):
                result = self._reused_baseline(name, fingerprint)
                if result is None:
                    result = self._baseline(name, fingerprint, snapshots, layout, stage1)
                    self._share(result, self.ctx.run_dir / name)
            self.results[name] = result.metrics
        return self._compare()

    def _baseline(
        self, name: str, fingerprint: str, snapshots, layout: Layout, stage1: Stage1
    ) -> StageResult:
        tags = {"baseline_fingerprint": fingerprint}
        budget = self.boost.baseline_epochs or self.boost.epochs
        if name == "baseline":
            return self._child(
                name, self._derived(epochs=budget), StagePlan(init_weights=stage1.weights), tags
            )
        if name == "annealed":
            lr = self.cfg.optimizer.lr * self.boost.anneal_factor
            return self._child(
                name,
                self._derived(epochs=budget, **{"optimizer.lr": lr}),
                StagePlan(init_weights=stage1.weights),
                tags,
            )
        result = self._snapshot_mean(snapshots, layout, stage1, tags)
        self._keep(name, result)
        return result

    def _reused_baseline(self, name: str, fingerprint: str) -> StageResult | None:
        """A finished baseline with this fingerprint (its metrics, curve and predictions), or None."""
        if not self.boost.reuse_baselines or self.worker.multi_node:
            return None
        for run in reuse.finished_runs(self.tracker, "baseline_fingerprint", fingerprint):
            metrics = reuse.final_metrics(run)
            if "acc" not in metrics:
                continue
            run_dir = self._local_or_fetched(run)
            log.info("reusing %s from MLflow run %s (%s)", name, run.info.run_id, run_dir)
            self.parent.set_tags({f"{name}_reused_from": run.info.run_id})
            result = StageResult(
                name,
                metrics,
                final_weights(run_dir),
                float("nan"),
                reuse.eval_curve(self.tracker, run.info.run_id),
                f"reused from run {run.info.run_id}",
                load_predictions(run_dir),
                run.info.run_id,
            )
            self.batching[name] = result.batching
            self._keep(name, result)
            return result
        return None

    def _keep(self, stage: str, result: StageResult) -> None:
        """What the comparison needs of a stage: its predictions and its per-epoch curve."""
        if result.correct is not None:
            self.correct[stage] = result.correct
        self.curves[stage] = result.history
        if stage == "stage2" and result.run_id is not None and self.worker.is_main:
            self.parent.link_model(result.run_id)

    def _store_basis_once(self, stage1: Stage1, basis_path: Path, new: bool) -> None:
        """The basis belongs to stage 1 (one per n_component): uploaded to stage 1's run when it
        is first computed, never again by the jobs that reuse it."""
        owner = stage1.reused_from or stage1.run_id
        if owner is None:
            return
        self.parent.set_tags({"pca_basis_run": owner})
        if new and basis_path.stat().st_size <= MAX_BASIS_ARTIFACT_MB * 2**20:
            self.tracker.run(owner).log_artifact(basis_path, "pca")

    def _child(
        self, stage: str, cfg: DictConfig, plan: StagePlan, tags: dict | None = None
    ) -> StageResult:
        stage_dir = self.ctx.run_dir / stage
        result = tracked_stage(
            self.tracker,
            stage,
            cfg,
            self.ctx,
            parent=self.parent,
            plan=plan,
            stage_dir=stage_dir,
            tags=tags,
            worker=self.worker,
        )
        self.batching[stage] = result.batching
        self._keep(stage, result)
        return result

    def _stage1(self) -> Stage1:
        fingerprint = reuse.stage1_fingerprint(self.cfg)
        with reuse.turn(
            self.ctx.launch_dir,
            self.worker,
            fingerprint,
            "stage 1",
            self.tracker,
            "stage1_fingerprint",
        ):
            reused = self._find_stage1(fingerprint)
            if reused is not None:
                log.info(
                    "reusing stage 1 from MLflow run %s (%s)", reused.reused_from, reused.run_dir
                )
                self.parent.set_tags({"stage1_reused_from": reused.reused_from})
                self.curves["stage1"] = reuse.eval_curve(self.tracker, reused.reused_from)
                return reused
            stage_dir = self.ctx.run_dir / "stage1"
            # weights agree across ranks: one worker per node keeps them, on that node's own disk
            snapshots = stage_dir / "snapshots" if self.worker.is_node_main else None
            result = self._child(
                "stage1",
                self.cfg,
                StagePlan(snapshot_dir=snapshots),
                {"stage1_fingerprint": fingerprint},
            )
            self._share(result, stage_dir, snapshots)
        return Stage1(stage_dir, result.metrics, rank=self.worker.rank, run_id=result.run_id)

    def _share(self, result: StageResult, stage_dir: Path, snapshots: Path | None = None) -> None:
        """A reusable run on a store other machines reach: its files go with it (reuse.share)."""
        if self.worker.is_main and self.tracker.shared and result.run_id is not None:
            reuse.share(self.tracker.run(result.run_id), stage_dir, snapshots)

    def _local_or_fetched(self, run) -> Path:
        """A reusable run's dir: where it ran when that is on this disk, else (a store other
        machines reach) a copy of its files from the store; the run's own dir if neither."""
        run_dir = Path(run.data.tags.get("run_dir", ""))
        if (run_dir / "predictions.npy").is_file() or not self.tracker.shared:
            return run_dir
        return reuse.fetch(self.tracker, run.info.run_id, self.ctx.launch_dir) or run_dir

    def _find_stage1(self, fingerprint: str) -> Stage1 | None:
        def usable(run) -> Stage1 | None:
            found = Stage1(
                self._local_or_fetched(run),
                reuse.final_metrics(run),
                run.info.run_id,
                self.worker.rank,
            )
            return found if found.weights.is_file() and found.snapshots.is_dir() else None

        if self.boost.stage1_run:
            run = self.tracker.get_run(self.boost.stage1_run)
            if run is None:
                raise DimReduceError(
                    f"boost.stage1_run={self.boost.stage1_run}: no such MLflow run in "
                    f"{self.tracker.uri}"
                )
            stage1 = usable(run)
            if stage1 is None:
                raise DimReduceError(
                    f"boost.stage1_run={self.boost.stage1_run}: its run dir "
                    f"{run.data.tags.get('run_dir')} lacks checkpoints/final.ckpt or snapshots/"
                )
            return stage1
        if (
            not self.boost.reuse_stage1 or self.worker.multi_node
        ):  # its files live on one node's disk
            return None
        for run in reuse.finished_runs(self.tracker, "stage1_fingerprint", fingerprint):
            stage1 = usable(run)
            if stage1 is not None:
                return stage1
        return None

    def _mean(self, snapshots, layout: Layout) -> dict[str, np.ndarray]:
        """The snapshot mean, read once per job (stage 2's start and the snapshot_mean baseline)."""
        if self._snapshot_mean_weights is None:
            self._snapshot_mean_weights = snapshot_mean(snapshots, layout)
        return self._snapshot_mean_weights

    def _stage2_start(self, stage1: Stage1, snapshots, layout: Layout) -> Path:
        """Stage 2's first weights: stage 1's final ones, or (`boost.start_from=mean`) their mean
        over the snapshots - the point the PCA directions are centred on."""
        if self.boost.start_from is StartFrom.final:
            return stage1.weights
        path = self.ctx.run_dir / "stage2" / f"start_mean_rank_{self.worker.rank}.ckpt"
        return save_atomic(
            network_with(self.cfg, stage1.weights, self._mean(snapshots, layout)), path
        )

    def _snapshot_mean(self, snapshots, layout: Layout, stage1: Stage1, tags: dict) -> StageResult:
        mean = self._mean(snapshots, layout)
        stage_dir = self.ctx.run_dir / "snapshot_mean"
        run = self.tracker.start_run(
            "snapshot_mean", tags={"stage": "snapshot_mean"}, parent=self.parent
        )
        record_config(run, self.cfg, self.ctx, "snapshot_mean")
        run.set_tags({"run_dir": str(stage_dir), "n_snapshots": str(len(snapshots)), **tags})
        return guarded(
            run,
            lambda: evaluate_weights(
                "snapshot_mean", self.cfg, mean, stage1.weights, run, stage_dir
            ),
        )

    def _log_curves(self) -> None:
        """Every stage's eval accuracy by epoch on one axis: stage 1's epochs, then the others
        continuing from its last epoch (the snapshot mean is one point there)."""
        offset = self.cfg.epochs
        for stage, history in self.curves.items():
            for epoch, result in history[-1:] if stage == "snapshot_mean" else history:
                if "acc" in result:
                    step = (
                        epoch
                        if stage == "stage1"
                        else offset + (0 if stage == "snapshot_mean" else epoch)
                    )
                    self.parent.log_metrics({f"{CURVE_PREFIX}{stage}": result["acc"]}, step)
        self.parent.flush()

    def _compare(self) -> dict[str, float]:
        # stage 2 and the gain first: MLflow's compare page plots the first metric a run logged
        ordered = sorted(self.results, key=lambda stage: stage != "stage2")
        metrics = {
            f"{stage}/{k}": v
            for stage in ordered
            for k, v in self.results[stage].items()
            if k in ("acc", "loss")
        }
        metrics = (
            {"stage2/acc": metrics.pop("stage2/acc"), "gain": gain(self.results), **metrics}
            if "stage2/acc" in metrics
            else {**metrics, "gain": gain(self.results)}
        )
        paired = {
            other: compare_paired(self.correct["stage2"], right)
            for other, right in self.correct.items()
            if other != "stage2" and "stage2" in self.correct
        }
        for other, cmp in paired.items():
            low, high = cmp.ci95
            metrics.update(
                {
                    f"vs_{other}/images": cmp.images,
                    f"vs_{other}/ci_low": low,
                    f"vs_{other}/ci_high": high,
                    f"vs_{other}/p_value": cmp.p_value,
                }
            )
        gain_cmp = paired.get(best_baseline(self.results))
        if gain_cmp is not None:
            low, high = gain_cmp.ci95
            metrics.update(
                {
                    "gain_images": gain_cmp.images,
                    "gain_ci_low": low,
                    "gain_ci_high": high,
                    "gain_p_value": gain_cmp.p_value,
                }
            )
        if self.pca_seconds is not None:
            metrics["pca_seconds"] = self.pca_seconds
        self.parent.log_metrics(metrics, 0, flush=True)
        self._log_curves()
        n_eval = len(self.correct["stage2"]) if "stage2" in self.correct else None
        plot = (
            comparison_plot(self.results, self.ctx.run_dir / "comparison.png", n_eval, gain_cmp)
            if self.worker.is_main
            else None
        )
        if plot is not None:
            self.parent.log_artifact(plot)
        table = summary_table(self.results) + ("\n" + paired_lines(paired) if paired else "")
        self.parent.log_text(table + "\n", "comparison.txt")
        if self.worker.is_main:
            trained = "\n".join(f"  {stage}: {how}" for stage, how in self.batching.items())
            print(
                f"[sporeflow] dim_reduce pipeline ({self.ctx.run_dir}); {self.tracker.describe()}\n{table}\n{trained}",
                file=sys.stderr,
            )
        return metrics
