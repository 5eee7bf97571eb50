"""A dim-reduce pipeline's last step: its stages compared on the validation split (`val/...`:
what a sweep decides on) and on the test split (`test/...`: what it reports; the table, figure
and paired lines read it, with the validation's paired lines below), every arm's cost beside
its accuracy (job.pipeline_cost), all on the pipeline's parent run; the table on the console
(or, in a sweep's job, one line naming its file). The pipeline orders the stages; this step
only reads their results."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from sporeflow.core.names import GAIN_BASELINE_TAG, StageKind
from sporeflow.engine.cost import Overhead
from sporeflow.job.budget import Budget
from sporeflow.job.pipeline_cost import log_costs
from sporeflow.report.comparison import (
    answer,
    best_baseline,
    comparison_plot,
    one_line_summary,
    paired_lines,
    pipeline_metrics,
    summary_table,
)
from sporeflow.report.sweep_report import CURVE_PREFIX
from sporeflow.runtime.mindspore_context import Worker
from sporeflow.stage.result import PREDICTIONS, TEST_PREDICTIONS, StageResult
from sporeflow.storage.files import write_text_atomic
from sporeflow.tracking.tracker import TrackedRun


@dataclass
class PipelineComparison:
    """What the comparison reads: the pipeline's finished stages and what it measured."""

    stages: dict[str, StageResult]  # in the order they ran (or were reused)
    parent: TrackedRun  # the pipeline's run: where the comparison is recorded
    worker: Worker
    home: Path  # the pipeline's run dir (comparison.png, cost.png, comparison.txt)
    stage1_epochs: int  # where the other stages' curves start on the epoch axis
    target_acc: float | None  # boost.target_acc: the passes each arm needs to reach it
    budget: Budget | None  # the budget arm's allowance, when it ran
    overhead: Overhead | None  # stage 1's snapshots and the PCA in passes, by the rule
    pca_seconds: float | None  # the PCA this pipeline computed (None: given or found cached)
    sweep_job: int | None  # the job's number in its sweep (None: not a sweep's job)
    where: str  # the parent run as the console names it

    def _log_curves(self) -> None:
        """Every stage's eval accuracy by epoch on one axis: stage 1's epochs (`epochs`), then
        the others continuing from its last epoch (the snapshot mean is one point there)."""
        offset = self.stage1_epochs
        for name, result in self.stages.items():
            history = result.history[-1:] if name == StageKind.snapshot_mean else result.history
            for epoch, evaluated in history:
                if "acc" not in evaluated:
                    continue
                step = (
                    epoch
                    if name == StageKind.stage1
                    else offset + (0 if name == StageKind.snapshot_mean else epoch)
                )
                self.parent.log_metrics({f"{CURVE_PREFIX}{name}": evaluated["acc"]}, step)
        self.parent.flush()

    def _log_predictions(self) -> None:
        """Every stage's right/wrong per validation and per test image on the pipeline's run
        (reused stages included), `predictions/<stage>/`: what a sweep's decision pairs (the
        validation file) and what its report pairs (the test file)."""
        for name, result in self.stages.items():
            for file in (PREDICTIONS, TEST_PREDICTIONS):
                path = result.stage_dir / file if result.stage_dir else None
                if path is not None and path.is_file():
                    self.parent.log_artifact(path, f"predictions/{name}")

    def record(self) -> dict[str, float]:
        """The comparison on both splits: `val/...` (what a sweep decides on) and `test/...`
        (what it reports; the table, figure and paired lines read it, with the validation's
        paired lines below)."""
        val = {name: r.metrics for name, r in self.stages.items()}
        tested = {name: r.test_metrics for name, r in self.stages.items()}
        val_correct = {
            n: r.val_correct for n, r in self.stages.items() if r.val_correct is not None
        }
        test_correct = {
            n: r.test_correct for n, r in self.stages.items() if r.test_correct is not None
        }
        best = best_baseline(val)  # the one choice every gain below reads
        val_metrics, val_paired, _ = pipeline_metrics(val, val_correct, best)
        test_metrics, paired, gain_cmp = pipeline_metrics(tested, test_correct, best)
        metrics = {
            **{f"val/{k}": v for k, v in val_metrics.items()},
            **{f"test/{k}": v for k, v in test_metrics.items()},
        }
        if self.pca_seconds is not None:
            metrics["pca_seconds"] = self.pca_seconds
        costs = log_costs(self, metrics, val_correct)
        self.parent.log_metrics(metrics, 0, flush=True)
        if best is not None:
            self.parent.set_tags({GAIN_BASELINE_TAG: best})
        self._log_curves()
        self._log_predictions()
        described = self.budget.describe() if self.budget else None
        table = summary_table(val, tested, metrics, best)
        for split, found in (("test", paired), ("validation", val_paired)):
            if found:
                table += f"\n  paired on the {split} images:\n" + paired_lines(found, described)
        table += "\n" + costs
        if paired:
            table += "\n" + answer(metrics)
        self.parent.log_text(table + "\n", "comparison.txt")
        if self.worker.is_main:
            n_test = (
                len(test_correct[StageKind.stage2]) if StageKind.stage2 in test_correct else None
            )
            plot = comparison_plot(
                tested, self.home / "comparison.png", n_test, gain_cmp, metrics["test/gain"]
            )
            if plot is not None:
                self.parent.log_artifact(plot)
            trained = "\n".join(
                f"  {name}: {r.batching}" for name, r in self.stages.items() if r.batching
            )
            self._say(metrics, f"{table}\n{trained}")
        return metrics

    def _say(self, metrics: dict[str, float], table: str) -> None:
        """The table on the console, or in a sweep's job one line naming the table's file:
        the sweep compares its jobs at the end, and N tables would bury that."""
        where = self.where
        if self.sweep_job is None:
            print(
                f"[sporeflow] dim_reduce pipeline ({self.home}); {where}\n{table}", file=sys.stderr
            )
            return
        kept = self.home / "comparison.txt"
        write_text_atomic(kept, table + "\n")
        print(
            f"[sporeflow] job {self.sweep_job}: {one_line_summary(metrics)}; table {kept}; {where}",
            file=sys.stderr,
        )
