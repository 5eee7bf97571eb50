"""The dim-reduce pipeline: stage 1 -> PCA -> stage 2 -> baselines -> comparison, under one
parent MLflow run whose children are the stages.

stage1:    plain training keeping weight snapshots; reused when a finished one has the same
           fingerprint (or `boost.stage1_run` names one);
stage2:    the PCA basis of the snapshots, then dimension-reduced steps (DimReduceStep);
baselines: plain continuation, annealed continuation, snapshot mean - what stage 2 must beat;
           each reused like stage 1 (job.reuse), so a stage-2 sweep trains it once;
           and the budget arm: plain training for what stage 2 cost (job.budget), the
           verdict at equal cost. Every arm's cost (engine.cost) is on the parent beside its
           accuracy, with its curve against passes since stage 1's end (report.cost_report).
Each stage is a spec (stage.spec) built here once and run by the job's StageRunner; the config
is never rewritten. A pipeline continued in its run dir (a SLURM requeue, `resume=`) takes each
stage it finished from its `stage_result.json`, continues the stage it stopped in from that
stage's newest checkpoint and run, and runs the rest. On several nodes every node decides so
from node 0's run dir (rank 0 writes the results and run markers there) and takes its own
ranks' weights and snapshots from its own, so all ranks make the same choice. The pipeline
run also carries every stage's per-epoch eval accuracy on one epoch axis (`curve/<stage>`),
reused stages included, so each job shows stage 1 -> stage 2.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np

from sporeflow.config.components import build_model
from sporeflow.config.facts import reuse_off_reason
from sporeflow.config.schema import StartFrom
from sporeflow.core.names import RUN_DIR_TAG, StageKind
from sporeflow.dim_reduce.pca import (
    Layout,
    check_count,
    check_npy_layout,
    load_or_compute_basis,
    snapshot_mean,
)
from sporeflow.dim_reduce.snapshots import DimReduceError, list_snapshots
from sporeflow.engine.cost import Cost, Overhead
from sporeflow.engine.macs import forward_macs, weight_count
from sporeflow.job import reuse
from sporeflow.job.budget import Budget, budget_of
from sporeflow.job.comparison import PipelineComparison
from sporeflow.job.runner import StageRunner
from sporeflow.job.runs import guarded
from sporeflow.job.specs import baseline_spec, budget_spec, stage1_spec, stage2_spec
from sporeflow.runtime.mindspore_context import barrier
from sporeflow.stage import fine_tune
from sporeflow.stage import provenance as made_with
from sporeflow.stage.evaluation import network_with
from sporeflow.stage.outputs import record_data
from sporeflow.stage.result import (
    TEST_PREDICTIONS,
    StageResult,
    load_predictions,
    load_result,
    save_result,
)
from sporeflow.stage.spec import FineTuneStart, StageSpec
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    checkpoint_files,
    final_weights,
    save_atomic,
)
from sporeflow.storage.files import sha256_file, write_text_atomic
from sporeflow.storage.run_marker import PIPELINE, read_run_marker

log = logging.getLogger(__name__)

MAX_BASIS_ARTIFACT_MB = 100
PCA_SECONDS = "pca_seconds.json"  # in the pipeline's run dir: the PCA it computed took so long


def basis_cost_file(basis_path: Path) -> Path:
    """Beside a computed basis: the seconds its PCA took (what stage 2 waited for)."""
    return Path(basis_path).with_suffix(".seconds.json")


class DimReducePipeline:
    """stage 1 -> PCA -> stage 2 -> baselines -> comparison, under one parent MLflow run."""

    def __init__(self, runner: StageRunner):
        self.runner = runner
        self.cfg, self.ctx, self.worker = runner.cfg, runner.ctx, runner.worker
        self.run_config = runner.plan.run  # the typed config: what settings are read from
        self.tracker, self.boost = runner.tracker, self.run_config.boost
        self.stages: dict[str, StageResult] = {}  # in the order they ran (or were reused)
        self.pca_seconds: float | None = None  # None: the basis was given or found cached
        self._layout: Layout | None = None
        self.budget: Budget | None = None  # the budget arm's allowance, when it runs
        self.pca_cost_seconds = 0.0  # what the basis stage 2 used took to compute (a figure)
        self.overhead: Overhead | None = None  # snapshots + PCA in passes, by the rule
        self._mean: dict | None = None
        self.provenance: dict[str, str] = {}  # code, MindSpore, data: part of reuse fingerprints
        self.continued = runner.plan.resume is not None  # a requeue or resume= continues it
        self.home = runner.plan.home
        self.node0_home = runner.plan.node0_home  # rank 0's results and markers

    def run(self) -> dict[str, float]:
        """The pipeline's comparison metrics (`stage2/acc`, `gain`, ...), as its run records them."""
        self.parent = self.runner.open_job_run(PIPELINE, self.home, resume=self.continued)
        if self.worker.is_main and not self.continued:  # what its stages saw
            record_data(self.parent, self.runner.data(self.run_config.dataset["batch_size"]))
        return guarded(self.parent, self._stages)

    def _trained(self, spec: StageSpec, fresh: Callable[[], StageResult]) -> StageResult:
        """A stage of this pipeline: when it is continued, the stage's result if it finished
        before, or the stage continued from its newest checkpoint if it stopped in it; else
        `fresh()`. A stage finished here leaves its result for a later continuation."""
        if self.continued:
            done = self._finished_before(spec)
            if done is not None:
                log.info("%s: finished before this continuation (%s)", spec.name, spec.stage_dir)
                return done
            if self._stopped_in(spec):
                return self._finished(self.runner.run(spec, self.parent, resume=True))
        return self._finished(fresh())

    def _on_node0(self, stage_dir: Path) -> Path:
        """A stage dir of this node's run dir, in node 0's (the same dir on node 0)."""
        return self.node0_home / Path(stage_dir).relative_to(self.home)

    def _finished_before(self, spec: StageSpec) -> StageResult | None:
        """The result the stage left when it finished, with this rank's own final weights."""
        done = load_result(self._on_node0(spec.stage_dir))
        if done is None:
            return None
        own = final_weights(spec.stage_dir, self.worker.rank)
        return replace(done, checkpoint=own, stage_dir=spec.stage_dir)

    def _stopped_in(self, spec: StageSpec) -> bool:
        """Whether the stage has its run (node 0's marker) and a checkpoint of this rank in its
        dir (it stopped mid-way)."""
        ckpts = checkpoint_dir(spec.stage_dir, self.worker.rank, self.worker.world_size)
        marked = read_run_marker(self._on_node0(spec.stage_dir)).get("mlflow_run_id")
        return bool(marked) and bool(checkpoint_files(ckpts, "epoch_*"))

    def _finished(self, result: StageResult) -> StageResult:
        if result.reused_from is None and self.worker.is_main:
            save_result(result)
        return result

    def _stages(self) -> dict[str, float]:
        reuse_off = reuse_off_reason(self.run_config)
        if reuse_off and self.worker.is_main:
            log.warning(reuse_off)
        self.provenance = made_with.of(self.runner.data(self.run_config.dataset["batch_size"]))
        start = fine_tune.start_of(self.run_config.train, self.tracker.reads)  # train.init_from
        if start is not None:  # the source's weights shape stage 1: part of its fingerprint
            self.provenance["init_weights"] = sha256_file(start.weights)[:12]
        stage1 = self._keep(self._stage1(start))
        barrier(self.worker)  # rank 0 has written every snapshot
        snapshots = self._snapshots(stage1)
        basis, basis_path = self._basis(stage1, snapshots)
        stage2_from = self._stage2_start(stage1, snapshots)
        self.overhead = self._overhead(len(snapshots))
        spec = stage2_spec(
            self.boost, self.home, stage2_from, basis, basis_path, len(snapshots), self.overhead
        )
        self._keep(self._trained(spec, lambda: self.runner.run(spec, self.parent)))
        for name in (StageKind(b.value) for b in self.boost.baselines):
            if name == StageKind.budget:
                arm = budget_spec(
                    self.cfg, self.home, stage1.checkpoint, self.provenance, self._budget()
                )
            else:
                arm = baseline_spec(
                    self.cfg, self.run_config, self.home, name, stage1.checkpoint, self.provenance
                )
            self._keep(self._baseline(arm, snapshots))
        if self.pca_seconds is None and self.continued and (self.home / PCA_SECONDS).is_file():
            self.pca_seconds = float(json.loads((self.home / PCA_SECONDS).read_text()))
        return PipelineComparison(
            self.stages,
            self.parent,
            self.worker,
            self.home,
            self.run_config.epochs,
            self.boost.target_acc,
            self.budget,
            self.overhead,
            self.pca_seconds,
            self.ctx.sweep.job if self.ctx.sweep is not None else None,
            self.tracker.describe(self.parent.run_id),
        ).record()

    def _overhead(self, n_snapshots: int) -> Overhead:
        """Stage 1's snapshots and the PCA in passes, by engine.cost's rule: from the snapshot
        count, k, the network's weights and forward MACs (one zero image, engine.macs) and the
        global batch - the same on every machine, load and rank. A given basis
        (`boost.pca_mat_path`) cost this job no PCA."""
        network, data = build_model(self.cfg), self.run_config.dataset
        size, channels = data.get("image_size"), data.get("channels")
        macs = (
            forward_macs(network, (int(channels), int(size), int(size)))
            if size and channels
            else weight_count(network)  # no image shape: one MAC per weight (engine.macs)
        )
        overhead = Overhead(
            n_snapshots,
            self.boost.n_component,
            weight_count(network),
            macs,
            self.runner.plan.global_batch,
            pca=self.boost.pca_mat_path is None,
        )
        log.info(
            "stage 2's overhead: %d snapshots %.3f + PCA %.3f passes (%d weights, %d forward "
            "MACs per image, batch %d)",
            n_snapshots,
            overhead.snapshot_passes,
            overhead.pca_passes,
            overhead.params,
            macs,
            overhead.batch,
        )
        return overhead

    def _budget(self) -> Budget:
        """What stage 2 cost, snapshots and PCA included (by the rule): the budget arm's
        allowance. With several workers every rank must train the same steps, and measured
        seconds differ by rank: `budget_unit=seconds` then falls back to passes, said once."""
        unit, stage1 = (
            self.boost.budget_unit.value,
            Cost.from_metrics(self.stages[StageKind.stage1].cost),
        )
        if self.worker.world_size > 1 and unit == "seconds":
            if self.worker.is_main:
                log.warning(
                    "budget arm: %d workers: the budget in passes, not seconds (measured "
                    "seconds differ by rank)",
                    self.worker.world_size,
                )
            unit = "passes"
        assert self.overhead is not None  # computed before stage 2
        self.budget = budget_of(
            unit,
            stage1,
            Cost.from_metrics(self.stages[StageKind.stage2].cost),
            self.overhead,
            self.boost.epochs,
            self.pca_cost_seconds,
        )
        log.info("budget arm: %s (%s)", self.budget.describe(), self.budget.unit)
        return self.budget

    def _keep(self, result: StageResult) -> StageResult:
        """A stage's result for the comparison; a reused one named on the parent, stage 2's
        model linked to it."""
        self.stages[result.name] = result
        if result.reused_from is not None:
            self.parent.set_tags({f"{result.name}_reused_from": result.reused_from})
        if result.name == StageKind.stage2 and result.run_id is not None and self.worker.is_main:
            self.parent.link_model(result.run_id)
        return result

    # --- stage 1 -------------------------------------------------------------------------------
    def _stage1(self, start: FineTuneStart | None) -> StageResult:
        spec = stage1_spec(
            self.cfg,
            self.run_config,
            self.home,
            self.worker.is_node_main,
            self.provenance,
            start,
        )
        if self.boost.stage1_run:
            return self._named_stage1(spec)
        return self._trained(
            spec,
            lambda: self.runner.reused_or_run(
                spec,
                self._usable_stage1,
                lambda: self.runner.run(spec, self.parent),
                self.boost.reuse_stage1,
            ),
        )

    def _reused(self, name: str, run, run_dir: Path) -> StageResult:
        run_id = run.info.run_id
        return StageResult(
            name,
            reuse.prefixed(run, "final/val/"),
            final_weights(run_dir, self.worker.rank),
            float("nan"),
            reuse.eval_curve(self.tracker.reads, run),
            f"reused from run {run_id}",
            load_predictions(run_dir),
            stage_dir=run_dir,
            reused_from=run_id,
            cost=reuse.cost_metrics(run),
            test_metrics=reuse.prefixed(run, "test/"),
            test_correct=load_predictions(run_dir, TEST_PREDICTIONS),
        )

    def _usable_stage1(self, run, run_dir: Path) -> StageResult | None:
        """A finished stage 1 whose final weights and snapshots are here."""
        found = self._reused(StageKind.stage1, run, run_dir)
        return found if found.checkpoint.is_file() and (run_dir / "snapshots").is_dir() else None

    def _named_stage1(self, spec: StageSpec) -> StageResult:
        """`boost.stage1_run`: that run, or an error naming what is missing."""
        named = self.boost.stage1_run
        assert named is not None, "_stage1 names a run only when boost.stage1_run is set"
        key = f"boost.stage1_run={named}"
        run = self.tracker.reads.get_run(named)
        if run is None:
            raise DimReduceError(f"{key}: no such MLflow run in {self.tracker.uri}")
        run_dir, problem = reuse.checked_dir(self.tracker.reads, run, self.ctx.launch_dir)
        if problem:
            raise DimReduceError(f"{key}: {problem} ({run_dir})")
        found = self._usable_stage1(run, run_dir)
        if found is None:
            raise DimReduceError(
                f"{key}: its run dir {run.data.tags.get(RUN_DIR_TAG)} lacks checkpoints/final.* or snapshots/"
            )
        return found

    # --- the PCA basis -------------------------------------------------------------------------
    def layout(self) -> Layout:
        """The network's trainable-parameter layout (built once, only to be read)."""
        if self._layout is None:
            self._layout = Layout.of(build_model(self.cfg))
        return self._layout

    def _snapshots(self, stage1: StageResult) -> list[Path]:
        snapshots = list_snapshots(stage1.files / "snapshots")
        if self.boost.pca_mat_path is None:
            check_count(len(snapshots), self.boost.n_component)
        if snapshots[0].suffix == ".npy":
            check_npy_layout(stage1.files / "snapshots", self.layout())
        return snapshots

    def _basis(self, stage1: StageResult, snapshots: list[Path]):
        """One worker per node computes (or finds) the basis; the node's others read it."""
        pca_dir = stage1.files / "pca"
        existed = set(pca_dir.glob("*.npy")) if self.worker.is_node_main else set()

        def compute():
            progress = self.run_config.callbacks.progress_bar and self.worker.is_main
            b = self.boost
            return load_or_compute_basis(
                snapshots,
                self.layout(),
                b.n_component,
                pca_dir,
                b.pca_mat_path,
                b.pca_chunk_mb,
                progress=progress,
            )

        if self.worker.is_node_main:
            started = time.perf_counter()
            basis, basis_path = compute()
            if basis_path not in existed:
                self.pca_seconds = time.perf_counter() - started
                if self.worker.is_main:  # a continued pipeline still reports it (_compare)
                    write_text_atomic(self.home / PCA_SECONDS, json.dumps(self.pca_seconds))
                    # beside the basis: what it cost, for every job that reuses it (budget)
                    write_text_atomic(basis_cost_file(basis_path), json.dumps(self.pca_seconds))
        barrier(self.worker)
        if not self.worker.is_node_main:
            basis, basis_path = compute()
        log.info("PCA basis %s from %d snapshots: %s", basis.shape, len(snapshots), basis_path)
        cost_file = basis_cost_file(basis_path)  # 0 for a given basis: it cost this job nothing
        self.pca_cost_seconds = (
            float(json.loads(cost_file.read_text())) if cost_file.is_file() else 0.0
        )
        self._store_basis_once(stage1, basis_path, new=basis_path not in existed)
        return np.asarray(basis), basis_path

    def _store_basis_once(self, stage1: StageResult, basis_path: Path, new: bool) -> None:
        """The basis belongs to stage 1 (one per n_component): uploaded to stage 1's run when it
        is first computed, never again by the jobs that reuse it."""
        owner = stage1.reused_from or stage1.run_id
        if owner is None:
            return
        self.parent.set_tags({"pca_basis_run": owner})
        if new and basis_path.stat().st_size <= MAX_BASIS_ARTIFACT_MB * 2**20:
            self.tracker.run(owner).log_artifact(basis_path, "pca", checksum=True)

    def _snapshot_mean(self, snapshots: list[Path]) -> dict[str, np.ndarray]:
        """The snapshot mean, read once per job (stage 2's start and the snapshot_mean baseline)."""
        if self._mean is None:
            self._mean = snapshot_mean(snapshots, self.layout())
        return self._mean

    def _stage2_start(self, stage1: StageResult, snapshots: list[Path]) -> Path:
        """Stage 2's first weights: stage 1's final ones, or (`boost.start_from=mean`) their mean
        over the snapshots - the point the PCA directions are centred on."""
        if self.boost.start_from is StartFrom.final:
            return stage1.checkpoint
        fmt = self.run_config.callbacks.checkpoint.format.value
        name = f"start_mean_rank_{self.worker.rank}.{fmt}"
        path = self.home / StageKind.stage2 / name
        return save_atomic(
            network_with(self.cfg, stage1.checkpoint, self._snapshot_mean(snapshots)), path
        )

    # --- baselines -----------------------------------------------------------------------------
    def _baseline(self, spec: StageSpec, snapshots: list[Path]) -> StageResult:
        def train() -> StageResult:
            if spec.name != StageKind.snapshot_mean:
                return self.runner.run(spec, self.parent)
            counted = replace(spec, tags={"n_snapshots": str(len(snapshots))})
            return self.runner.evaluate(counted, self._snapshot_mean(snapshots), self.parent)

        def usable(run, run_dir: Path) -> StageResult | None:
            found = self._reused(spec.name, run, run_dir)
            if found.val_correct is None:  # its paired comparison would silently drop out
                log.info(
                    "%s: run %s has no predictions.npy in %s", spec.name, run.info.run_id, run_dir
                )
                return None
            return found if "acc" in found.metrics else None

        return self._trained(
            spec,
            lambda: self.runner.reused_or_run(spec, usable, train, self.boost.reuse_baselines),
        )
