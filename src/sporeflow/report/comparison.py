"""Stage comparison for pipelines: the gain of stage 2 over its strongest baseline, a table, a plot.

`results` maps each stage that ran to its final metrics: "stage1", "stage2", and the baselines
(whatever `boost.baselines` listed); every entry other than the two stages is a baseline."""

from __future__ import annotations

import logging
import math
from pathlib import Path

from sporeflow.core.names import StageKind
from sporeflow.report.intervals import wilson
from sporeflow.report.paired import Versus, answer_line, compare_paired

log = logging.getLogger(__name__)

STAGE2 = StageKind.stage2
STAGES = (StageKind.stage1, STAGE2)
# the equal-cost arm: compared on its own line (`gain_at_cost`), not in `gain`
BUDGET = StageKind.budget
# the baselines in the order the answer names them
STAGE_ORDER = (StageKind.baseline, StageKind.annealed, StageKind.snapshot_mean)


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


def best_baseline(val: dict[str, dict], metric: str = "acc") -> str | None:
    """The one baseline a pipeline's gain is measured against, chosen once and on validation
    only (every line, file, metric and figure of the pipeline reads this choice, never chooses
    again; a test-chosen baseline would make the test images choose what they report): the
    highest `metric` on validation; among baselines tied there, the first that ran (the order of
    `boost.baselines`). The answer line shows stage 2 against every baseline, tied ones included.
    None without a baseline."""
    names = [n for n, m in val.items() if n not in (*STAGES, BUDGET) and metric in m]
    if not names:
        return None
    top = max(val[n][metric] for n in names)
    return next(n for n in names if val[n][metric] == top)


def gain(results: dict[str, dict], best: str | None, metric: str = "acc") -> float:
    """stage2's metric minus the chosen baseline's (`best`: best_baseline); NaN without one."""
    if best is None or best not in results or STAGE2 not in results:
        return float("nan")
    return results[STAGE2][metric] - results[best][metric]


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


def one_line_summary(metrics: dict[str, float]) -> str:
    """Stage 2's test accuracy and its gains for a sweep job's one console line, read from the
    metrics its run records (`test/...`): the console says what MLflow says."""
    nan = float("nan")
    line = (
        f"stage2 acc={metrics.get('test/stage2/acc', nan):.4f}, "
        f"gain {metrics.get('test/gain', nan):+.4f}"
    )
    if "test/gain_at_cost" in metrics:
        line += f", at equal cost {metrics['test/gain_at_cost']:+.4f}"
    return line


def summary_table(
    val: dict[str, dict], tested: dict[str, dict], metrics: dict[str, float], best: str | None
) -> str:
    """Every stage's accuracy on the validation images (what choices read) and its accuracy
    and loss on the test images (what it reports), then the gains on both as the run's
    `metrics` record them (`best`: the baseline they are against)."""
    nan = float("nan")
    lines = [f"  {'stage':14s} {'val acc':>8s} {'test acc':>8s} {'test loss':>9s}"]
    for stage, found in tested.items():
        lines.append(
            f"  {stage:14s} {val.get(stage, {}).get('acc', nan):8.4f} "
            f"{found.get('acc', nan):8.4f} {found.get('loss', nan):9.4f}"
        )
    against = f"{best}, the best baseline on validation" if best else "best baseline"
    lines.append(
        f"  gain (stage2 - {against}, acc): test {metrics.get('test/gain', nan):+.4f}, "
        f"val {metrics.get('val/gain', nan):+.4f}"
    )
    if "test/gain_at_cost" in metrics:
        lines.append(
            f"  gain at equal cost (stage2 - budget, acc): test {metrics['test/gain_at_cost']:+.4f}, "
            f"val {metrics.get('val/gain_at_cost', nan):+.4f}"
        )
    return "\n".join(lines)


def arm_order(arms) -> list[str]:
    """The arms stage 2 is compared with, in the order the answer names them: stage 1, the
    baselines, the budget arm last."""
    order = {s: i for i, s in enumerate((StageKind.stage1, *STAGE_ORDER, BUDGET))}
    return sorted((a for a in arms if a != STAGE2), key=lambda a: (order.get(a, len(order)), a))


def answer(metrics: dict[str, float], split: str = "test") -> str:
    """The pipeline's one-line answer (report.paired.answer_line) from the metrics its run
    records on `split` (`<split>/vs_<arm>/diff|ci_low|ci_high|p_value|images`): the console,
    comparison.txt, `sporeflow compare` and the Python API all read it from those numbers."""
    prefix = f"{split}/vs_"
    arms = [
        k[len(prefix) : -len("/p_value")]
        for k in metrics
        if k.startswith(prefix) and k.endswith("/p_value")
    ]
    compared = []
    for arm in arm_order(arms):
        m = {k: metrics.get(f"{prefix}{arm}/{k}") for k in ("ci_low", "ci_high", "p_value")}
        diff = metrics.get(f"{prefix}{arm}/diff")
        if diff is None:  # recorded before the difference was: the accuracies'
            diff = metrics.get(f"{split}/{STAGE2}/acc", math.nan) - metrics.get(
                f"{split}/{arm}/acc", math.nan
            )
        images = int(metrics.get(f"{prefix}{arm}/images", 0))
        compared.append(Versus(arm, diff, m["ci_low"], m["ci_high"], m["p_value"], images))
    return answer_line(compared, f"{split} images", BUDGET)


def comparison_plot(
    results: dict[str, dict],
    path: Path,
    n_eval: int | None = None,
    gain_cmp=None,
    gain_value: float = float("nan"),
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
        title = f"dim_reduce: gain over best baseline {gain_value:+.4f}"
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
    results: dict[str, dict], correct: dict, best: str | None
) -> tuple[dict, dict, object]:
    """A pipeline's comparison: (metrics as its run records them, stage 2's paired comparison
    with every other stage, the one with the best baseline or None).

    Metrics: `stage2/acc` and `gain` first (MLflow's compare page plots the first metric a run
    logged), every stage's acc and loss, `vs_<stage>/images|ci_low|ci_high|p_value` and the
    same for the gain over the best baseline (`best`: best_baseline, chosen once for both
    splits) as `gain_images`, `gain_ci_low`, ...; with the
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
    metrics = {**first, "gain": gain(results, best), **metrics}
    paired = {
        other: compare_paired(correct[STAGE2], right)
        for other, right in correct.items()
        if other != STAGE2 and STAGE2 in correct
    }
    for other, cmp in paired.items():
        metrics.update(_paired_metrics(f"vs_{other}/", cmp) | {f"vs_{other}/diff": cmp.diff})
    gain_cmp = paired.get(best) if best is not None else None
    if gain_cmp is not None:
        metrics.update(_paired_metrics("gain_", gain_cmp))
    if BUDGET in paired:
        metrics["gain_at_cost"] = gain_at_cost(results)
        metrics.update(_paired_metrics("gain_at_cost_", paired[BUDGET]))
    return metrics, paired, gain_cmp
