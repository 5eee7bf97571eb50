"""Stage comparison for pipelines: the gain of stage 2 over its strongest baseline, a table, a plot.

`results` maps each stage that ran to its final metrics: "stage1", "stage2", and the baselines
(whatever `boost.baselines` listed); every entry other than the two stages is a baseline."""
from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

STAGES = ("stage1", "stage2")


def gain(results: dict[str, dict], metric: str = "acc") -> float:
    """stage2's metric minus the best baseline's (NaN when no baseline ran)."""
    others = [m[metric] for name, m in results.items() if name not in STAGES and metric in m]
    return results["stage2"][metric] - max(others) if others else float("nan")


def summary_table(results: dict[str, dict]) -> str:
    lines = [f"  {'stage':14s} {'acc':>8s} {'loss':>8s}"]
    for stage, metrics in results.items():
        lines.append(f"  {stage:14s} {metrics.get('acc', float('nan')):8.4f} {metrics.get('loss', float('nan')):8.4f}")
    lines.append(f"  gain (stage2 - best baseline, acc): {gain(results):+.4f}")
    return "\n".join(lines)


def comparison_plot(results: dict[str, dict], path: Path) -> Path | None:
    """A bar chart of each stage's accuracy; None (and a warning) if matplotlib fails."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        stages = list(results)
        accs = [results[s].get("acc", float("nan")) for s in stages]
        fig, ax = plt.subplots(figsize=(6, 3.2))
        bars = ax.bar(stages, accs, color=["#888", "#2a7", "#57c", "#c84", "#a5a"][: len(stages)])
        ax.bar_label(bars, fmt="%.4f", fontsize=8)
        low = min(a for a in accs if a == a)
        ax.set_ylim(max(0.0, low - 0.05), min(1.0, max(accs) + 0.03))
        ax.set_ylabel("eval accuracy")
        ax.set_title(f"dim_reduce: gain over best baseline {gain(results):+.4f}")
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished pipeline
        log.warning("comparison plot failed: %s", ex)
        return None
