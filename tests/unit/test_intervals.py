"""Issue 76 item 1: every interval from report.intervals, against independent references -
statsmodels' Wilson interval, the published worked example of Newcombe's paired interval
(Fagerland, Lydersen and Laake, Statistical Analysis of Contingency Tables, 2017, chapter 8:
Cavo et al. 2012, table [[59, 6], [16, 80]], -0.0621 (-0.1186 to -0.0046)) and the paper's
formula written apart (helpers.intervals) - and their bounds where Wald's failed: at 0 and 1,
and when no image differs. Coverage: Wilson's exactly (the binomial enumerated), Newcombe's
by simulation with numpy."""

from __future__ import annotations

import numpy as np
import pytest
from statsmodels.stats.proportion import proportion_confint

from helpers.intervals import newcombe_method10, paired_arrays, wilson_roots
from sporeflow.report.decision import Point, decide, stratified
from sporeflow.report.intervals import (
    difference_interval,
    mean_interval,
    newcombe_paired,
    wilson,
)
from sporeflow.report.paired import compare_paired

CASES = [(0, 1), (0, 144), (1, 144), (143, 144), (144, 144), (7, 20), (330, 360), (1, 2)]


@pytest.mark.parametrize(("k", "n"), CASES)
def test_wilson_is_statsmodels_wilson_and_stays_within_0_and_1(k, n):
    low, high = wilson(k, n)
    assert (low, high) == pytest.approx(
        proportion_confint(k, n, alpha=0.05, method="wilson"), abs=1e-9
    )
    assert (low, high) == pytest.approx(wilson_roots(k, n), abs=1e-9)
    assert 0.0 <= low <= k / n <= high <= 1.0 and high - low > 0


def test_the_issues_sweep_point_has_an_interval_below_1():
    """0.9931 on 144 validation images (143 right): Wald's gave 0.9795..1.0066."""
    point = Point("p", {1: 0}, {1: np.array([True] * 143 + [False])})
    low, high = point.ci95
    assert high < 1.0 and (low, high) == pytest.approx(
        proportion_confint(143, 144, method="wilson"), abs=1e-9
    )


def test_newcombes_published_worked_example():
    low, high = newcombe_paired(59, 6, 16, 80)
    assert (round(low, 4), round(high, 4)) == (-0.1186, -0.0046)
    cmp = compare_paired(*paired_arrays(59, 6, 16, 80))
    assert cmp.ci95 == pytest.approx((low, high), abs=1e-12)
    assert round(cmp.diff, 4) == -0.0621


def random_tables(count: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        n = int(rng.integers(1, 500))
        yield tuple(int(x) for x in rng.multinomial(n, rng.dirichlet([0.5] * 4)))


EDGES = [
    (144, 0, 0, 0),  # both right on every image
    (0, 0, 0, 144),  # both wrong on every image
    (143, 0, 0, 1),  # no image differs, 0.9931 each (the issue's vs-best cell)
    (0, 144, 0, 0),
    (0, 0, 144, 0),
    (140, 4, 0, 0),
    (1, 0, 0, 0),
    (5, 3, 1, 0),
]


@pytest.mark.parametrize("table", [*EDGES, *random_tables(40)])
def test_newcombe_matches_the_papers_formula_and_its_bounds_hold(table):
    low, high = newcombe_paired(*table)
    assert (low, high) == pytest.approx(newcombe_method10(*table), abs=1e-9)
    a, b, c, d = table
    diff = (b - c) / (a + b + c + d)
    assert -1.0 <= low <= diff <= high <= 1.0
    assert high - low > 0  # a width wherever an image was scored, none differing included


def test_no_differing_image_is_a_real_interval_around_zero_in_the_decision():
    """Two points right on the same images: the vs-best cell read -0.0000 -0.0000..-0.0000."""
    right = np.array([True] * 143 + [False])
    decision = decide([Point("a", {1: 0}, {1: right}), Point("b", {1: 1}, {1: right.copy()})])
    (_, other) = decision.records()
    assert other["vs_best_low"] < 0 < other["vs_best_high"]
    assert (-other["vs_best_high"], -other["vs_best_low"]) == pytest.approx(
        newcombe_method10(143, 0, 0, 1), abs=1e-9
    )
    _, rows = decision.rows("acc")
    assert "-0.0000..-0.0000" not in " ".join(rows[1])


def test_seeds_are_pooled_by_concatenation_for_points_and_pairs():
    rng = np.random.default_rng(4)
    first = {s: rng.random(150 + 50 * s) < 0.9 for s in (1, 2, 3)}
    second = {s: rng.random(150 + 50 * s) < 0.85 for s in (1, 2, 3)}
    a, b = (
        np.concatenate([first[s] for s in (1, 2, 3)]),
        np.concatenate([second[s] for s in (1, 2, 3)]),
    )
    table = (
        int((a & b).sum()),
        int((a & ~b).sum()),
        int((~a & b).sum()),
        int((~a & ~b).sum()),
    )
    assert stratified(first, second).ci95 == pytest.approx(newcombe_method10(*table), abs=1e-9)
    point = Point("p", {s: s for s in first}, first)
    assert point.ci95 == pytest.approx(
        proportion_confint(int(a.sum()), a.size, method="wilson"), abs=1e-9
    )


def scores(rng, n, stage2, budget):
    """Stage 2 right minus the budget arm right, per image (int8, as sweep_report makes them)."""
    return (rng.random(n) < stage2).astype(np.int8) - (rng.random(n) < budget).astype(np.int8)


def test_a_score_is_newcombes_interval_of_its_plus_ones_against_its_minus_ones():
    rng = np.random.default_rng(6)
    s = scores(rng, 360, 0.9, 0.85)
    up, down = int((s == 1).sum()), int((s == -1).sum())
    assert mean_interval(s) == pytest.approx(
        newcombe_method10(0, up, down, s.size - up - down), abs=1e-9
    )
    low, high = mean_interval(np.zeros(144, np.int8))  # stage 2 and budget agree everywhere
    assert -1.0 < low < 0.0 < high < 1.0


def test_two_scores_differ_within_their_range_and_with_a_width():
    rng = np.random.default_rng(7)
    a, b = scores(rng, 144, 0.95, 0.9), scores(rng, 144, 0.9, 0.9)
    low, high = difference_interval(a, b)
    diff = float(a.mean() - b.mean())
    assert -2.0 <= low <= diff <= high <= 2.0
    low, high = difference_interval(a, a.copy())  # the same scores: no image differs
    assert low < 0.0 < high


def test_wilson_covers_about_95_percent_exactly():
    """The binomial enumerated (scipy): near 0.95 over several settings, on average at least
    0.94; Wald's near 1 covers far less (0.76 at 0.99 on 144 images)."""
    from scipy.stats import binom

    covered = []
    for n, p in [(144, 0.99), (144, 0.9), (360, 0.95), (50, 0.5), (360, 0.3)]:
        k = np.arange(n + 1)
        bounds = np.array([wilson(int(i), n) for i in k])
        covered.append(float(binom.pmf(k, n, p)[(bounds[:, 0] <= p) & (p <= bounds[:, 1])].sum()))
    assert min(covered) > 0.92 and np.mean(covered) > 0.94, covered


@pytest.mark.parametrize(
    ("n", "cells"),
    [(360, (0.85, 0.05, 0.03, 0.07)), (50, (0.3, 0.2, 0.1, 0.4)), (144, (0.9, 0.04, 0.02, 0.04))],
)
def test_newcombe_covers_about_95_percent_by_simulation(n, cells):
    rng = np.random.default_rng(8)
    theta = cells[1] - cells[2]
    draws = rng.multinomial(n, cells, size=3000)
    hits = [low <= theta <= high for low, high in (newcombe_paired(*map(int, t)) for t in draws)]
    assert 0.935 < np.mean(hits) < 0.975


def test_every_view_of_an_interval_reads_the_same_numbers():
    """The paired lines, a pipeline's MLflow metrics, a sweep's points table and records, the
    front's metrics, the reported line and the figures' error bars: all the numbers of
    report.intervals, nowhere recomputed."""
    from sporeflow.report import front
    from sporeflow.report.comparison import accuracy_errors, best_baseline, pipeline_metrics
    from sporeflow.report.sweep_report import reported_line

    rng = np.random.default_rng(9)
    correct = {s: rng.random(144) < p for s, p in (("stage1", 0.9), ("stage2", 0.99))}
    correct["baseline"] = correct["stage2"].copy()  # no image differs
    results = {s: {"acc": float(c.mean())} for s, c in correct.items()}
    metrics, paired, gain_cmp = pipeline_metrics(results, correct, best_baseline(results))
    for other, cmp in paired.items():
        low, high = cmp.ci95
        assert (metrics[f"vs_{other}/ci_low"], metrics[f"vs_{other}/ci_high"]) == (low, high)
        assert f"95% CI {low:+.4f}..{high:+.4f}" in cmp.describe()
        assert (low, high) == pytest.approx(
            newcombe_method10(
                cmp.both,
                cmp.only_first,
                cmp.only_second,
                144 - cmp.both - cmp.only_first - cmp.only_second,
            ),
            abs=1e-9,
        )
    assert (metrics["gain_ci_low"], metrics["gain_ci_high"]) == gain_cmp.ci95
    assert gain_cmp.ci95[0] < 0 < gain_cmp.ci95[1]  # stage 2 against its copy

    points = [Point(s, {1: i}, {1: c}) for i, (s, c) in enumerate(correct.items())]
    decision = decide(points)
    _, rows = decision.rows("acc")
    for record, row in zip(decision.records(), rows, strict=True):
        point = next(p for p in points if p.label == record["point"])
        assert (record["ci_low"], record["ci_high"]) == point.ci95
        assert row[4] == f"{record['ci_low']:.4f}..{record['ci_high']:.4f}"
    found = front.front(points, {p.label: float(i) for i, p in enumerate(points)})
    logged = front.metrics(found)
    for row, record in enumerate(found.records()):
        point = next(p for p in points if p.label == record["point"])
        assert (logged[f"front/{row}/ci_low"], logged[f"front/{row}/ci_high"]) == point.ci95

    tested = points[1]
    low, high = tested.ci95
    assert f"(95% CI {low:.4f}..{high:.4f}, 144 images)" in reported_line(tested, tested, False)
    below, above = accuracy_errors([tested.accuracy], 144)
    assert tested.accuracy - below[0] == pytest.approx(low, abs=1e-12)
    assert tested.accuracy + above[0] == pytest.approx(high, abs=1e-12) and high <= 1.0
