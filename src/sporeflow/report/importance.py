"""Which settings mattered: a finished sweep's parameter importances, by Optuna's own evaluator.

A grid or race sweep has no Optuna study: one is built in memory from its finished jobs, one
trial per point (a point = a job's swept settings without the seed) whose value is the mean of
its seeds' objective values. One trial per point, not per job: the importance is a property of
the settings, and PED-ANOVA ranks trials into a top quantile, where a point's several seeds
would each take a place (a lucky seed counted as a second good setting); the Optuna sweeper
tells its study one value per trial over its seeds too, so both roads give Optuna the same
kind of trial. An Optuna sweep's study is read as it is (its own distributions and values).

The evaluator: PED-ANOVA, Optuna's default (`get_param_importances`). fANOVA needs
scikit-learn, which sporeflow does not install, and Optuna gives it no advice by study size;
its note on PED-ANOVA does: "it is preferable to include at least 5 trials above
target_quantile". So `target_quantile` is 0.1 (Optuna's default) from 50 points on, and below
that as large as it takes to hold 5 trials, at most 0.5 (a top that is more than half of the
study no longer says what reaches the top): 4 to 9 points have fewer than 5 in their top,
and the line says so.

Uncertainty: each share is shown with a 95% percentile bootstrap interval over the points
(RESAMPLES studies of as many points drawn with replacement, each evaluated the same way): a
share that moves from 0.1 to 0.9 when other points happen to have run says little, and the
line shows it. Where the sweep's decision separates no point from the best, no importance is
given at all (entry.sweep_summary says so in one line): a share would only rank noise.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sporeflow.config import objective
from sporeflow.report.comparison import save_figure

log = logging.getLogger(__name__)

MIN_POINTS = 4  # fewer finished points: no importances (nothing, no line)
TOP_TRIALS = 5  # Optuna's advice: at least 5 trials above PED-ANOVA's target_quantile
METHOD = "PED-ANOVA"
METRIC_PREFIX = "importance/"
FIGURE = "param_importances.png"
# PED-ANOVA's warning when ties at the cutoff put every trial in the top: equal shares follow
SAME_SET = "Target and region quantiles select the same set of trials"
RESAMPLES = 100  # bootstrap studies for the shares' intervals (about 20 ms each at 12 points)


@dataclass
class Importances:
    """Each assessed parameter's share (summing to 1, largest first), from `points` trials."""

    values: dict[str, float]
    points: int
    target_quantile: float
    tied: bool = False  # Optuna found the top quantile to be every trial: equal shares
    intervals: dict[str, tuple[float, float]] | None = None  # 95% bootstrap over the points

    @property
    def top(self) -> int:
        """Trials in PED-ANOVA's top quantile (Optuna's `_QuantileFilter`: ceil(q * n))."""
        return max(1, math.ceil(self.target_quantile * self.points))

    def metrics(self) -> dict[str, float]:
        return {METRIC_PREFIX + k: v for k, v in self.values.items()}

    def shares(self) -> str:
        """`name 0.44 (0.10..0.80), ...`: each share with its bootstrap interval when known."""
        found = self.intervals or {}
        return ", ".join(
            f"{k} {v:.2f}" + (f" ({found[k][0]:.2f}..{found[k][1]:.2f})" if k in found else "")
            for k, v in self.values.items()
        )

    def line(self) -> str:
        shares = self.shares()
        counted = f"{self.points} points" + (
            ", 95% bootstrap intervals over them" if self.intervals else ""
        )
        if self.tied:
            return (
                f"importances: {shares} ({METHOD}, {counted}; tied: the top "
                f"{self.target_quantile:.0%} holds every point, so Optuna shares it equally)"
            )
        rough = (
            f"; rough: {self.top} points in the top {self.target_quantile:.0%}, Optuna advises "
            f"{TOP_TRIALS}"
            if self.top < TOP_TRIALS
            else ""
        )
        return f"importances: {shares} ({METHOD}, {counted}{rough})"


def target_quantile(points: int) -> float:
    """PED-ANOVA's top quantile for a study of `points` trials (see the module's docstring)."""
    return min(0.5, max(0.1, TOP_TRIALS / points))


def _number(value: str) -> int | float | None:
    """A swept value as Optuna's numeric distributions take it; None: not a number."""
    text = value.strip()
    if text.lower() in ("true", "false", "nan", "inf", "-inf", "+inf", ""):
        return None  # booleans and non-finite values are categories, not positions on a range
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return None


def distributions(points: dict[tuple, float], keys: list[str]) -> dict[str, Any]:
    """Each key's distribution over the points' values: all integers -> IntDistribution over
    their range, all numbers -> FloatDistribution over it, anything else categorical."""
    from optuna.distributions import (
        CategoricalDistribution,
        FloatDistribution,
        IntDistribution,
    )

    found = {}
    for i, key in enumerate(keys):
        raw = sorted({p[i] for p in points})
        numbers = [_number(v) for v in raw]
        if all(n is not None for n in numbers):
            low, high = min(numbers), max(numbers)  # type: ignore[type-var]
            if all(isinstance(n, int) for n in numbers):
                found[key] = IntDistribution(int(low), int(high))
            else:
                found[key] = FloatDistribution(float(low), float(high))
        else:
            found[key] = CategoricalDistribution(raw)
    return found


def _param(value: str, dist: Any) -> Any:
    from optuna.distributions import FloatDistribution, IntDistribution

    if isinstance(dist, IntDistribution):
        return int(value)
    if isinstance(dist, FloatDistribution):
        return float(value)
    return value


def point_values(jobs: list, keys: list[str], key: str) -> dict[tuple, float]:
    """Every finished point (its swept values but the seed, in `keys` order) and the mean of
    its jobs' finite `key` values."""
    seen: dict[tuple, list[float]] = {}
    for job in jobs:
        value = job.metrics.get(key)
        if job.status != "FINISHED" or value is None or not math.isfinite(value):
            continue
        seen.setdefault(tuple(str(job.values.get(k, "")) for k in keys), []).append(value)
    return {p: sum(v) / len(v) for p, v in seen.items()}


def study_of_jobs(jobs: list, keys: list[str], key: str) -> Any:
    """An in-memory Optuna study of the sweep's finished points: one trial per point (its
    params on the swept ranges, its value the mean over its seeds), in `key`'s direction."""
    import optuna

    swept = [k for k in keys if k != "seed"]
    points = point_values(jobs, swept, key)
    dists = distributions(points, swept)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize" if objective.maximize(key) else "minimize")
    study.add_trials(
        [
            optuna.trial.create_trial(
                params={k: _param(v, dists[k]) for k, v in zip(swept, point, strict=True)},
                distributions=dists,
                value=value,
            )
            for point, value in points.items()
        ]
    )
    return study


def evaluate(study: Any) -> Importances | None:
    """The study's parameter importances (Optuna's `get_param_importances`, PED-ANOVA sized
    to the study), or None: fewer than MIN_POINTS completed trials, or fewer than two
    parameters that vary among them."""
    import optuna
    from optuna.trial import TrialState

    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
    if len(trials) < MIN_POINTS:
        return None
    varied = [
        name
        for name in dict.fromkeys(k for t in trials for k in t.params)
        if len({repr(t.params.get(name)) for t in trials}) > 1
    ]
    # One parameter that varies takes all of the importance (1.0 after normalising) whatever
    # its effect: a number that says nothing, so none is given.
    if len(varied) < 2:
        return None
    quantile = target_quantile(len(trials))
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    with warnings.catch_warnings(record=True) as caught:  # kept from the console; ties: said
        warnings.simplefilter("always")
        values = optuna.importance.get_param_importances(study, evaluator=evaluator, params=varied)
    tied = any(SAME_SET in str(w.message) for w in caught)
    intervals = bootstrap(trials, study.direction, varied, quantile)
    return Importances(dict(values), len(trials), quantile, tied, intervals)


def bootstrap(
    trials: list, direction: Any, varied: list[str], quantile: float
) -> dict[str, tuple[float, float]]:
    """Each share's 95% percentile interval over RESAMPLES studies of the trials drawn with
    replacement (a fixed seed: the same sweep gives the same line); a resample where a setting
    no longer varies gives it a share of 0 (it explains nothing there)."""
    import numpy as np
    import optuna

    rng = np.random.default_rng(0)
    evaluator = optuna.importance.PedAnovaImportanceEvaluator(target_quantile=quantile)
    drawn: dict[str, list[float]] = {name: [] for name in varied}
    for _ in range(RESAMPLES):
        sample = [trials[i] for i in rng.integers(0, len(trials), len(trials))]
        moving = [n for n in varied if len({repr(t.params.get(n)) for t in sample}) > 1]
        shares = dict.fromkeys(varied, 0.0)
        if len(moving) > 1:
            study = optuna.create_study(direction=direction)
            study.add_trials(sample)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                shares |= optuna.importance.get_param_importances(
                    study, evaluator=evaluator, params=moving
                )
        elif moving:
            shares[moving[0]] = 1.0
        for name in varied:
            drawn[name].append(float(shares[name]))
    return {
        n: (float(np.percentile(v, 2.5)), float(np.percentile(v, 97.5))) for n, v in drawn.items()
    }


def load_study(name: str, storage: str) -> Any | None:
    """An Optuna sweep's study from its storage; None when it cannot be read."""
    try:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        return optuna.load_study(study_name=name, storage=storage)
    except Exception as ex:  # noqa: BLE001 - importances must not fail a finished sweep
        log.warning("could not read Optuna study %r for importances: %s", name, ex)
        return None


def figure(found: Importances, path: Path) -> Path | None:
    """A horizontal bar per parameter, the most important on top; None when it fails."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        names = list(found.values)[::-1]
        fig, ax = plt.subplots(figsize=(6.0, 1.2 + 0.45 * len(names)))
        ax.barh(names, [found.values[n] for n in names], color="#2a7")
        for y, name in enumerate(names):
            ax.text(found.values[name], y, f" {found.values[name]:.2f}", va="center", fontsize=8)
        ax.set_xlim(0, 1.1)
        ax.set_xlabel("importance (share, sums to 1)")
        ax.set_title(
            f"{METHOD}, {found.points} points, top {found.target_quantile:.0%}", fontsize=9
        )
        ax.grid(axis="x", alpha=0.3)
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished sweep
        log.warning("importance plot failed: %s", ex)
        return None
