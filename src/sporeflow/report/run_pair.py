"""Any two finished runs compared on the test images both were tested on (`sporeflow compare
RUN_A RUN_B`, `sporeflow.compare(a, b)`): each one's accuracy with its Wilson interval, A minus B
with Newcombe's paired interval and McNemar's exact p (report.intervals and report.paired hold the
statistics; nothing is computed twice), a verdict word, what each cost and the config keys that
differ. The pair is computed here once; the console's lines and the Python API's RunPair are the
same numbers.

Two runs are paired image by image only when their test splits are one split: the data set's
name and digest each run recorded as its `evaluation` input (tracking.datasets: the files' bytes
and what selected the images) and the number of test outcomes each kept must be equal, else the
comparison is refused (ConfigError: exit 2, one line)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sporeflow.core.errors import ConfigError
from sporeflow.report.intervals import Interval, wilson
from sporeflow.report.paired import compare_paired

VERDICTS = ("better", "worse", "cannot tell")  # A against B, at McNemar p < 0.05
ABSENT = "(absent)"  # a config key one run's config does not have


@dataclass(frozen=True)
class Side:
    """One run as the comparison reads it: the name the user gave, its MLflow run, right/wrong
    per test image (in the split's order), the test split's identity as the run recorded it
    (`<data set name> <digest>`), its composed config flattened (`optimizer.lr`) and its
    `cost/*` metrics."""

    name: str
    run_id: str | None
    correct: np.ndarray
    test_data: str
    config: dict[str, str]
    cost: dict[str, float]


@dataclass(frozen=True)
class RunPair:
    """Run A against run B on the same `images` test images (`test_data`: the split's recorded
    name and digest). `diff` is A's accuracy minus B's (`diff_images`: how many more images A
    gets right) with Newcombe's 95% interval `diff_ci`; `p_value` McNemar's exact p on the images
    only one got right (`only_a`, `only_b`); `verdict` "better", "worse" (A than B, p < 0.05) or
    "cannot tell". `cost` maps each `cost/*` metric to (A's, B's), None where a run has none;
    `config_diff` each config key whose values differ to (A's, B's), sorted by key."""

    a: str
    b: str
    run_a: str | None
    run_b: str | None
    images: int
    test_data: str
    acc_a: float
    acc_b: float
    ci_a: Interval
    ci_b: Interval
    diff: float
    diff_ci: Interval
    diff_images: int
    only_a: int
    only_b: int
    p_value: float
    verdict: str
    cost: dict[str, tuple[float | None, float | None]]
    config_diff: dict[str, tuple[str, str]]

    def lines(self) -> list[str]:
        """What `sporeflow compare RUN_A RUN_B` prints: the paired table, the cost side by
        side, then the config keys that differ (`key: a -> b`)."""
        return [*paired_table(self), *cost_table(self), *config_lines(self)]


def refuse_other_images(a: Side, b: Side) -> None:
    """ConfigError (one line) unless both runs were tested on one test split: the recorded
    data set name and digest, and the number of test outcomes each kept."""
    if a.test_data == b.test_data and a.correct.shape == b.correct.shape:
        return
    raise ConfigError(
        f"RUN_A={a.name} and RUN_B={b.name} were not tested on the same images: "
        f"{_tested_on(a)} against {_tested_on(b)}; compare two runs of one test split "
        "(same data set, files and selection)"
    )


def _tested_on(side: Side) -> str:
    return f"{side.test_data} ({side.correct.size} test images)"


def verdict(cmp) -> str:
    """A against B in one word, from McNemar's test on the images only one got right."""
    if not cmp.significant:
        return VERDICTS[2]
    return VERDICTS[0] if cmp.images > 0 else VERDICTS[1]


def paired(a: Side, b: Side) -> RunPair:
    """The comparison of two runs tested on one split (refused otherwise: refuse_other_images)."""
    refuse_other_images(a, b)
    cmp = compare_paired(a.correct, b.correct)
    right_a, right_b = int(a.correct.sum()), int(b.correct.sum())
    n = cmp.n
    return RunPair(
        a=a.name,
        b=b.name,
        run_a=a.run_id,
        run_b=b.run_id,
        images=n,
        test_data=a.test_data,
        acc_a=right_a / n if n else float("nan"),
        acc_b=right_b / n if n else float("nan"),
        ci_a=wilson(right_a, n),
        ci_b=wilson(right_b, n),
        diff=cmp.diff if n else float("nan"),
        diff_ci=cmp.ci95,
        diff_images=cmp.images,
        only_a=cmp.only_first,
        only_b=cmp.only_second,
        p_value=cmp.p_value,
        verdict=verdict(cmp),
        cost=side_by_side(a.cost, b.cost),
        config_diff=config_diff(a.config, b.config),
    )


def side_by_side(a: dict[str, float], b: dict[str, float]) -> dict[str, tuple]:
    """Each key of either mapping -> (A's value, B's), None where one has none; sorted."""
    return {key: (a.get(key), b.get(key)) for key in sorted({*a, *b})}


def config_diff(a: dict[str, str], b: dict[str, str]) -> dict[str, tuple[str, str]]:
    """The flattened config keys whose values differ (a key one config lacks: ABSENT there)."""
    return {
        key: (a.get(key, ABSENT), b.get(key, ABSENT))
        for key in sorted({*a, *b})
        if a.get(key, ABSENT) != b.get(key, ABSENT)
    }


def _interval(ci: Interval) -> str:
    return f"{ci[0]:.4f}..{ci[1]:.4f}"


def paired_table(pair: RunPair) -> list[str]:
    """Both accuracies with their Wilson intervals, then A - B with Newcombe's interval, the
    images it is, McNemar's p and the verdict."""
    low, high = pair.diff_ci
    return [
        f"on the same {pair.images} test images ({pair.test_data}):",
        f"  {'run':5s} {'acc':>7s}  {'95% CI':15s} source",
        f"  {'A':5s} {pair.acc_a:7.4f}  {_interval(pair.ci_a):15s} {_run(pair.a, pair.run_a)}",
        f"  {'B':5s} {pair.acc_b:7.4f}  {_interval(pair.ci_b):15s} {_run(pair.b, pair.run_b)}",
        f"  {'A - B':5s} {pair.diff:+7.4f}  {low:+.4f}..{high:+.4f} "
        f"{pair.diff_images:+d} images (only A right: {pair.only_a}, only B right: "
        f"{pair.only_b}), McNemar p={pair.p_value:.3g} -> {said(pair.verdict)}",
    ]


def said(word: str) -> str:
    """The verdict as the table ends its line: "A better", "A worse", "cannot tell"."""
    return word if word == VERDICTS[2] else f"A {word}"


def _run(name: str, run_id: str | None) -> str:
    return name if not run_id or run_id == name else f"{name} (run {run_id})"


def _cost_value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def cost_table(pair: RunPair) -> list[str]:
    """What each run spent (its `cost/*` metrics), side by side."""
    if not pair.cost:
        return ["cost: neither run recorded one"]
    width = max(len(key) for key in pair.cost)
    rows = [
        f"  {key:{width}s} {_cost_value(a):>12s} {_cost_value(b):>12s}"
        for key, (a, b) in pair.cost.items()
    ]
    return ["cost:", f"  {'':{width}s} {'A':>12s} {'B':>12s}", *rows]


def config_lines(pair: RunPair) -> list[str]:
    """The config keys that differ, `key: a -> b`, sorted."""
    if not pair.config_diff:
        return ["config: no key differs"]
    head = f"config keys that differ ({len(pair.config_diff)}, A -> B):"
    return [head, *(f"  {key}: {a} -> {b}" for key, (a, b) in pair.config_diff.items())]
