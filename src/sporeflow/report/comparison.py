"""Stage comparison for pipelines: the gain of stage 2 over its strongest baseline, a table, a plot.

`results` maps each stage that ran to its final metrics: "stage1", "stage2", and the baselines
(whatever `boost.baselines` listed); every entry other than the two stages is a baseline."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from sporeflow.core.names import StageKind
from sporeflow.report.intervals import wilson
from sporeflow.report.paired import compare_paired

log = logging.getLogger(__name__)

STAGE2 = StageKind.stage2
STAGES = (StageKind.stage1, STAGE2)
# the equal-cost arm: compared on its own line (`gain_at_cost`), not in `gain`
BUDGET = StageKind.budget


def save_figure(fig, path: Path) -> Path:
    """Write a matplotlib figure as a PNG (its folder created) and free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def accuracy_errors(accs: list[float], n_eval: int) -> list[list[float]]:
    """A figure's error bars (below, above) for accuracies on `n_eval` images: their Wilson
    intervals (report.intervals), which stay within 0..1 (0 for an accuracy it lacks)."""
    below, above = [], []
    for acc in accs:
        low, high = (acc, acc) if math.isnan(acc) else wilson(acc * n_eval, n_eval)
        below.append(0.0 if math.isnan(acc) else acc - low)
        above.append(0.0 if math.isnan(acc) else high - acc)
    return [below, above]


def best_baseline(results: dict[str, dict], metric: str = "acc") -> str | None:
    """The baseline with the best `metric` in `results`: pass validation results, since
    choosing it is a choice (a test-chosen best baseline would bias the gain downward)."""
    others = [
        (m[metric], name)
        for name, m in results.items()
        if name not in (*STAGES, BUDGET) and metric in m
    ]
    return max(others)[1] if others else None


def gain(results: dict[str, dict], metric: str = "acc", chosen_by: dict | None = None) -> float:
    """stage2's metric minus the best baseline's (NaN when no baseline ran); the best one as
    `chosen_by` (validation results) ranks them, else as `results` do."""
    best = best_baseline(chosen_by or results, metric)
    return results[STAGE2][metric] - results[best][metric] if best else float("nan")


def gain_at_cost(results: dict[str, dict], metric: str = "acc") -> float:
    """stage2's metric minus the budget arm's (NaN without one): the gain at equal cost."""
    if BUDGET not in results:
        return float("nan")
    return results[STAGE2][metric] - results[BUDGET][metric]


def paired_lines(paired: dict, budget: str | None = None) -> str:
    """One line per arm stage 2 was compared with at equal epochs, on the same eval images,
    then the verdict at equal cost (`budget`: what the budget arm was given)."""
    lines = [
        f"  stage2 vs {other}: {cmp.describe()}" for other, cmp in paired.items() if other != BUDGET
    ]
    if BUDGET in paired:
        given = f" ({budget})" if budget else ""
        lines.append(f"  at equal cost{given}: stage2 vs budget: {paired[BUDGET].describe()}")
    return "\n".join(lines)


def one_line_summary(results: dict[str, dict]) -> str:
    """Stage 2's accuracy and its gains, for a sweep job's one console line (its table is in
    the job's comparison.txt, and the sweep compares the jobs at its end)."""
    line = f"stage2 acc={results[STAGE2].get('acc', float('nan')):.4f}, gain {gain(results):+.4f}"
    if BUDGET in results:
        line += f", at equal cost {gain_at_cost(results):+.4f}"
    return line


def summary_table(val: dict[str, dict], tested: dict[str, dict]) -> str:
    """Every stage's accuracy on the validation images (what choices read) and its accuracy
    and loss on the test images (what it reports), then the gains on both."""
    nan = float("nan")
    lines = [f"  {'stage':14s} {'val acc':>8s} {'test acc':>8s} {'test loss':>9s}"]
    for stage, metrics in tested.items():
        lines.append(
            f"  {stage:14s} {val.get(stage, {}).get('acc', nan):8.4f} "
            f"{metrics.get('acc', nan):8.4f} {metrics.get('loss', nan):9.4f}"
        )
    lines.append(
        f"  gain (stage2 - best baseline, acc): test {gain(tested, chosen_by=val):+.4f}, val {gain(val):+.4f}"
    )
    if BUDGET in tested and STAGE2 in tested:
        lines.append(
            f"  gain at equal cost (stage2 - budget, acc): test {gain_at_cost(tested):+.4f}, "
            f"val {gain_at_cost(val):+.4f}"
        )
    return "\n".join(lines)


def comparison_plot(
    results: dict[str, dict], path: Path, n_eval: int | None = None, gain_cmp=None
) -> Path | None:
    """Each stage's accuracy on a 0-1 axis with its 95% interval (n_eval images), the gain and
    its interval and p-value in the title; None (and a warning) if matplotlib fails."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        stages = list(results)
        accs = [results[s].get("acc", float("nan")) for s in stages]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        errors = accuracy_errors(accs, n_eval) if n_eval else None
        bars = ax.bar(
            stages,
            accs,
            yerr=errors,
            capsize=4,
            color=["#888", "#2a7", "#57c", "#c84", "#a5a"][: len(stages)],
        )
        ax.bar_label(bars, fmt="%.4f", fontsize=8, label_type="center")
        ax.set_ylim(0.0, 1.05)  # from 0: differences of a few images must not look like results
        ax.set_ylabel(
            f"eval accuracy ({n_eval} images, 95% interval)" if n_eval else "eval accuracy"
        )
        title = f"dim_reduce: gain over best baseline {gain(results):+.4f}"
        if gain_cmp is not None:
            low, high = gain_cmp.ci95
            title += f"\n95% CI {low:+.4f}..{high:+.4f}, McNemar p={gain_cmp.p_value:.3g}"
        ax.set_title(title, fontsize=9)
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished pipeline
        log.warning("comparison plot failed: %s", ex)
        return None


def seeds_plot(groups: dict[str, dict[str, list[float]]], path: Path) -> Path | None:
    """Per configuration (label -> arm -> accuracies over seeds): each arm's mean with its
    sample standard deviation, grouped bars on a 0-1 axis."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import numpy as np

        arms = list(
            dict.fromkeys(arm for by_arm in groups.values() for arm, v in by_arm.items() if v)
        )
        width = 0.8 / max(1, len(groups))
        fig, ax = plt.subplots(figsize=(max(6, 1.4 * len(arms)), 3.6))
        for i, (label, by_arm) in enumerate(groups.items()):
            values = [by_arm.get(arm, []) for arm in arms]
            means = [np.mean(v) if v else np.nan for v in values]
            sds = [np.std(v, ddof=1) if len(v) > 1 else 0.0 for v in values]
            n = max(len(v) for v in values)
            ax.bar(
                np.arange(len(arms)) + i * width,
                means,
                width,
                yerr=sds,
                capsize=3,
                label=f"{n} seeds: {label or '(defaults)'}"[:80],
            )
        ax.set_xticks(np.arange(len(arms)) + width * (len(groups) - 1) / 2, arms)
        ax.set_ylim(0.0, 1.0 + 0.08 * (len(groups) + 1))  # room above the bars for the legend
        ax.set_yticks([0.0, 0.2, 0.4, 0.6, 0.8, 1.0])
        ax.set_ylabel("eval accuracy (mean +- sd over seeds)")
        ax.legend(fontsize=7, loc="upper center")
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail the command
        log.warning("seeds plot failed: %s", ex)
        return None


def _paired_metrics(prefix: str, cmp) -> dict[str, float]:
    low, high = cmp.ci95
    return {
        f"{prefix}images": cmp.images,
        f"{prefix}ci_low": low,
        f"{prefix}ci_high": high,
        f"{prefix}p_value": cmp.p_value,
    }


def pipeline_metrics(
    results: dict[str, dict], correct: dict, chosen_by: dict | None = None
) -> tuple[dict, dict, object]:
    """A pipeline's comparison: (metrics as its run records them, stage 2's paired comparison
    with every other stage, the one with the best baseline or None).

    Metrics: `stage2/acc` and `gain` first (MLflow's compare page plots the first metric a run
    logged), every stage's acc and loss, `vs_<stage>/images|ci_low|ci_high|p_value` and the
    same for the gain over the best baseline as `gain_images`, `gain_ci_low`, ...; with the
    budget arm, the gain at equal cost as `gain_at_cost`, `gain_at_cost_images`, ...."""
    ordered = sorted(results, key=lambda stage: stage != STAGE2)
    metrics = {
        f"{stage}/{k}": v
        for stage in ordered
        for k, v in results[stage].items()
        if k in ("acc", "loss")
    }
    acc = f"{STAGE2}/acc"
    first = {acc: metrics.pop(acc)} if acc in metrics else {}
    metrics = {**first, "gain": gain(results, chosen_by=chosen_by), **metrics}
    paired = {
        other: compare_paired(correct[STAGE2], right)
        for other, right in correct.items()
        if other != STAGE2 and STAGE2 in correct
    }
    for other, cmp in paired.items():
        metrics.update(_paired_metrics(f"vs_{other}/", cmp))
    gain_cmp = paired.get(best_baseline(chosen_by or results))
    if gain_cmp is not None:
        metrics.update(_paired_metrics("gain_", gain_cmp))
    if BUDGET in paired:
        metrics["gain_at_cost"] = gain_at_cost(results)
        metrics.update(_paired_metrics("gain_at_cost_", paired[BUDGET]))
    return metrics, paired, gain_cmp
