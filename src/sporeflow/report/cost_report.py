"""A pipeline's arms against what they cost: each arm's accuracy curve on one axis of
forward+backward passes since stage 1's end, its cost beside its accuracy, the cost to reach a
target accuracy, and the figure. Plain numbers in, so it imports no engine.

An arm's curve is `[(passes since stage 1's end, acc), ...]`, starting at stage 1's end
(0 passes, stage 1's accuracy): stage 2's own evaluations already count the snapshots' and
the PCA's passes (its cost/passes include them), the snapshot mean sits at the snapshots' cost.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

from sporeflow.report.comparison import accuracy_errors, save_figure

log = logging.getLogger(__name__)

COST_CURVE_PREFIX = "cost_curve/"  # the parent's accuracy by passes since stage 1's end


def arm_curve(history: list, offset: float, start_acc: float | None) -> list[tuple[float, float]]:
    """(passes since stage 1's end, acc) of an arm's evaluations that know their cost, after
    stage 1's end point (when its accuracy is known)."""
    points = [(0.0, start_acc)] if start_acc is not None else []
    for _, evaluated in history:
        if "acc" in evaluated and "passes" in evaluated:
            points.append((offset + float(evaluated["passes"]), float(evaluated["acc"])))
    return points


def passes_to_target(curve: list[tuple[float, float]], target: float) -> float:
    """The passes at which an arm's curve first reaches `target`; infinite when it never does
    (AlgoPerf's score for an unreached target)."""
    for passes, acc in curve:
        if acc >= target:
            return passes
    return math.inf


def cost_metrics(costs: dict[str, dict], offsets: dict[str, float]) -> dict[str, float]:
    """Each arm's cost on the parent: `<arm>/passes` (its run's `cost/passes`, stage 2's with
    its snapshots and PCA; plus `offsets`: what an arm waited for that its run does not count,
    the snapshot mean's snapshots) and `<arm>/seconds` (its wall seconds: compile, steps,
    evaluation, snapshots)."""
    found = {}
    for arm, cost in costs.items():
        if not cost:
            continue
        found[f"{arm}/passes"] = offsets.get(arm, 0.0) + cost.get("cost/passes", 0.0)
        found[f"{arm}/seconds"] = sum(
            cost.get(f"cost/{part}_seconds", 0.0)
            for part in ("compile", "step", "eval", "snapshot")
        )
    return found


def cost_table(costs: dict[str, dict], metrics: dict[str, float]) -> str:
    """One line per arm: its passes and seconds split (the console and comparison.txt)."""
    lines = [
        f"  {'cost':14s} {'passes':>9s} {'compile s':>9s} {'steps s':>8s} {'eval s':>7s} "
        f"{'snap s':>7s} {'images':>9s}"
    ]
    for arm, cost in costs.items():
        if not cost:
            continue
        lines.append(
            f"  {arm:14s} {metrics.get(f'{arm}/passes', 0.0):9.1f} "
            f"{cost.get('cost/compile_seconds', 0.0):9.2f} {cost.get('cost/step_seconds', 0.0):8.2f} "
            f"{cost.get('cost/eval_seconds', 0.0):7.2f} {cost.get('cost/snapshot_seconds', 0.0):7.2f} "
            f"{int(cost.get('cost/images', 0)):9d}"
        )
    return "\n".join(lines)


def cost_plot(
    curves: dict[str, list[tuple[float, float]]],
    path: Path,
    n_eval: int | None,
    budget_passes: float | None,
    title: str,
) -> Path | None:
    """Accuracy against passes since stage 1's end, one line per arm, each arm's 95% interval
    at its end (n_eval images); None (and a warning) if matplotlib fails."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for arm, curve in curves.items():
            if not curve:
                continue
            xs, ys = zip(*curve, strict=True)
            line = ax.plot(xs, ys, marker="o", markersize=3, label=arm)[0]
            if n_eval:
                bars = accuracy_errors([ys[-1]], n_eval)
                ax.errorbar(xs[-1], ys[-1], yerr=bars, color=line.get_color(), capsize=4)
        if budget_passes:
            ax.axvline(budget_passes, color="#999", linestyle="--", linewidth=1)
        ax.set_xlabel("forward+backward passes since stage 1's end")
        ax.set_ylabel(
            f"eval accuracy ({n_eval} images, 95% interval at the end)"
            if n_eval
            else "eval accuracy"
        )
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8, loc="lower right")
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished pipeline
        log.warning("cost plot failed: %s", ex)
        return None
