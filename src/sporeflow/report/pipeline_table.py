"""The dim-reduce pipelines of an experiment as `sporeflow compare` prints them: one row per
pipeline run (each stage's accuracy, the gain with its 95% interval and McNemar p, the gain
at equal cost with its p), or with
--seeds one row per configuration, mean +- sd over its seeds. Reads MLflow Run objects only.
The figures are the test images' (what reports; `test/...`); a run recorded before the
validation split shows its own (then unprefixed) ones."""

from __future__ import annotations

import statistics

from sporeflow.config.schema import Baseline
from sporeflow.core.names import OVERRIDES_TAG, SWEEP_RUN_ID_TAG, StageKind
from sporeflow.report.comparison import answer

STAGES = (StageKind.stage1, StageKind.stage2, *(StageKind(b.value) for b in Baseline))


def reported(metrics: dict) -> dict:
    """A pipeline run's test metrics named without `test/` (a run from before the
    validation split: its metrics as they are)."""
    tested = {k[len("test/") :]: v for k, v in metrics.items() if k.startswith("test/")}
    return tested or metrics


def _cell(metrics: dict, key: str, fmt: str, width: int) -> str:
    return format(metrics[key], fmt).rjust(width) if key in metrics else "-".rjust(width)


def without_seed(overrides: str) -> str:
    return " ".join(o for o in overrides.split() if not o.startswith("seed="))


def mean_sd(values: list[float]) -> str:
    mean = statistics.fmean(values)
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{mean:.4f}+-{sd:.4f}"


def pipelines_table(runs: list) -> list[str]:
    """A header and one line per pipeline run."""
    lines = [
        f"{'run id':32s} {'status':9s} "
        + " ".join(f"{s:>13s}" for s in STAGES)
        + f" {'gain':>8s} {'gain 95% CI':>17s} {'p':>6s} {'gain_at_cost':>12s} {'p':>6s}  overrides"
    ]
    for run in runs:
        m = reported(run.data.metrics)
        cells = " ".join(_cell(m, f"{s}/acc", ".4f", 13) for s in STAGES)
        ci = "-"
        if "gain_ci_low" in m:
            ci = f"{m['gain_ci_low']:+.4f}..{m['gain_ci_high']:+.4f}"
        lines.append(
            f"{run.info.run_id:32s} {run.info.status:9s} {cells} {_cell(m, 'gain', '+.4f', 8)} "
            f"{ci.rjust(17)} {_cell(m, 'gain_p_value', '.3g', 6)} "
            f"{_cell(m, 'gain_at_cost', '+.4f', 12)} {_cell(m, 'gain_at_cost_p_value', '.3g', 6)}  "
            f"{run.data.tags.get(OVERRIDES_TAG, '')}"
        )
    return lines


def answer_lines(runs: list) -> list[str]:
    """Each pipeline's one-line answer (report.comparison.answer), from the metrics its run
    recorded, as its console and comparison.txt said it; a run without them is left out."""
    return [
        f"{run.info.run_id}: {answer(run.data.metrics)}"
        for run in runs
        if any(k.startswith("test/vs_") for k in run.data.metrics)
    ]


def seed_groups(runs: list) -> dict[str, list]:
    """Finished runs grouped by configuration: what differs but the seed, within one sweep (a
    run of another sweep, or a single run, is never pooled with a seed sweep's runs); labels
    name the sweep when the same overrides ran in several."""
    keyed: dict[tuple[str, str], list] = {}
    for run in runs:
        if run.info.status == "FINISHED":
            sweep = run.data.tags.get(SWEEP_RUN_ID_TAG, run.info.run_id)
            overrides = without_seed(run.data.tags.get(OVERRIDES_TAG, ""))
            keyed.setdefault((sweep, overrides), []).append(run)
    groups = {overrides: members for (_, overrides), members in keyed.items()}
    if len(groups) < len(keyed):
        groups = {f"{o} (sweep {sw[:8]})": members for (sw, o), members in keyed.items()}
    return groups


def seeds_table(groups: dict[str, list]) -> list[str]:
    """A header and one line per configuration: each stage's and the gains' mean +- sd."""
    lines = [
        f"{'seeds':>5s} "
        + " ".join(f"{s:>15s}" for s in (*STAGES, "gain", "gain_at_cost"))
        + "  overrides (without seed=)"
    ]
    for overrides, members in groups.items():
        cells = []
        for key in (*(f"{s}/acc" for s in STAGES), "gain", "gain_at_cost"):
            values = [
                reported(r.data.metrics)[key] for r in members if key in reported(r.data.metrics)
            ]
            cells.append((mean_sd(values) if values else "-").rjust(15))
        lines.append(f"{len(members):5d} " + " ".join(cells) + f"  {overrides}")
    return lines


def seed_arms(groups: dict[str, list]) -> dict[str, dict[str, list[float]]]:
    """configuration -> stage -> its accuracies over the seeds (report.comparison.seeds_plot)."""
    return {
        label: {
            s: [
                reported(r.data.metrics)[f"{s}/acc"]
                for r in members
                if f"{s}/acc" in reported(r.data.metrics)
            ]
            for s in STAGES
        }
        for label, members in groups.items()
    }
