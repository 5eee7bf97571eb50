"""A sweep's decision (report.decision) against independent references: the stratified paired
difference from numpy on the per-image differences, its interval from Newcombe's formula
(helpers.intervals), the exact McNemar p-value
from statsmodels and scipy, Holm's correction from statsmodels; and the rule: a winner only when
every other point is shown worse."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.multitest import multipletests

from helpers.intervals import newcombe_method10
from sporeflow.report.decision import Point, decide, holm, stratified


def outcomes(rng, n, acc):
    return rng.random(n) < acc


def test_stratified_difference_and_interval_pool_the_common_seeds_images():
    """The difference over every common seed's images, its interval Newcombe's paired one on
    them pooled (the paper's formula, helpers.intervals)."""
    rng = np.random.default_rng(0)
    first = {s: outcomes(rng, 300 + 40 * s, 0.8) for s in (1, 2, 3)}
    second = {s: outcomes(rng, 300 + 40 * s, 0.75) for s in (1, 2, 3)}
    second[4] = outcomes(rng, 300, 0.7)  # a seed the first point did not run: not paired
    result = stratified(first, second)
    d = {s: first[s].astype(int) - second[s].astype(int) for s in (1, 2, 3)}
    n = sum(v.size for v in d.values())
    assert result.n == n
    assert result.diff == pytest.approx(sum(v.sum() for v in d.values()) / n)
    a = np.concatenate([first[s] for s in (1, 2, 3)])
    b = np.concatenate([second[s] for s in (1, 2, 3)])
    table = [int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())]
    low, high = result.ci95
    assert (low, high) == pytest.approx(newcombe_method10(*table), abs=1e-9)
    assert low < result.diff < high


def test_pooled_exact_mcnemar_matches_statsmodels_and_scipy():
    rng = np.random.default_rng(1)
    first = {s: outcomes(rng, 200, 0.7) for s in (1, 2)}
    second = {s: outcomes(rng, 200, 0.66) for s in (1, 2)}
    result = stratified(first, second)
    a, b = np.concatenate([first[1], first[2]]), np.concatenate([second[1], second[2]])
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    assert result.p_value == pytest.approx(mcnemar(table, exact=True).pvalue)
    only_a, only_b = table[0][1], table[1][0]
    assert result.p_value == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue)


@pytest.mark.parametrize(
    "p", [[0.01, 0.04, 0.03, 0.5], [0.2], [0.001, 0.001, 0.9], [0.049, 0.02, 0.3, 0.01, 0.011]]
)
def test_holm_matches_statsmodels(p):
    assert holm(p) == pytest.approx(list(multipletests(p, method="holm")[1]))


def point(label, per_seed):
    return Point(label, {s: i for i, s in enumerate(per_seed)}, per_seed)


def test_a_point_clearly_ahead_of_all_others_is_the_winner():
    rng = np.random.default_rng(2)
    truth = {s: outcomes(rng, 2000, 0.7) for s in (1, 2)}
    strong = point("rho=0.4", {s: truth[s] | (rng.random(2000) < 0.5) for s in truth})
    weak = [point(f"rho={r}", truth) for r in (0.55, 0.7)]
    decision = decide([*weak, strong])
    assert decision.best is strong and decision.kind == "winner" and decision.tied == []
    line = decision.line("stage2/acc")
    assert (
        line.startswith("winner: rho=0.4 (stage2/acc 0.")
        and "2 seeds, 2000 validation images" in line
    )


def test_points_within_the_noise_are_a_tie_however_the_order_falls():
    """The README sweep's case: settings one or two images apart. The leader is named as such,
    never as a winner, and every point it cannot be told from is listed."""
    rng = np.random.default_rng(3)
    base = outcomes(rng, 360, 0.9)
    points = []
    for k in range(4):
        flipped = base.copy()
        flipped[rng.choice(360, size=k, replace=False)] ^= True
        points.append(point(f"job{k}", {1: flipped}))
    decision = decide(points)
    assert decision.kind == "tie"
    assert {p.label for p in decision.tied} | {decision.best.label} == {f"job{k}" for k in range(4)}
    assert decision.line("acc").startswith(f"tie: {decision.best.label} (acc ")
    assert "cannot be told apart" in decision.line("acc")


def test_one_point_is_no_winner_and_no_outcomes_is_no_decision():
    only = point("lr=0.1", {1: np.ones(10, bool)})
    assert decide([only]).kind == "tie"
    assert "only one point" in decide([only]).line("acc")
    assert decide([Point("failed")]) is None


def test_a_points_interval_is_statsmodels_wilson_on_its_pooled_images():
    """Every seed's images concatenated, as the paired tests pool them; one seed: exactly
    statsmodels' interval of that seed."""
    from statsmodels.stats.proportion import proportion_confint

    rng = np.random.default_rng(5)
    per_seed = {1: outcomes(rng, 360, 0.8), 2: outcomes(rng, 500, 0.6)}
    right = sum(int(o.sum()) for o in per_seed.values())
    assert point("p", per_seed).ci95 == pytest.approx(
        proportion_confint(right, 860, alpha=0.05, method="wilson"), abs=1e-9
    )
    one = point("q", {1: per_seed[1]}).ci95
    assert one == pytest.approx(
        proportion_confint(int(per_seed[1].sum()), 360, alpha=0.05, method="wilson"), abs=1e-9
    )


def test_one_row_per_point_best_first_with_its_seeds_jobs_and_verdict():
    rng = np.random.default_rng(2)
    truth = {s: outcomes(rng, 2000, 0.7) for s in (1, 2)}
    strong = Point("rho=0.4", {1: 4, 2: 5}, {s: truth[s] | (rng.random(2000) < 0.5) for s in truth})
    weak = Point("rho=0.7", {1: 0, 2: 1}, truth)
    decision = decide([weak, strong])
    header, rows = decision.rows("stage2/acc")
    assert header == [
        "point",
        "seeds",
        "jobs",
        "stage2/acc",
        "95% CI",
        "vs best",
        "95% CI",
        "p Holm",
        "verdict",
    ]
    assert [r[:3] for r in rows] == [["rho=0.4", "1,2", "4,5"], ["rho=0.7", "1,2", "0,1"]]
    assert rows[0][-1] == "winner" and rows[1][-1] == "worse"
    versus = decision.others[0].against_best
    assert float(rows[1][5]) == pytest.approx(-versus.diff, abs=1e-4)
    assert float(rows[1][7]) == pytest.approx(decision.others[0].p_holm, rel=1e-2)


# ---- the gain at equal cost: per-image scores (stage 2 right minus its budget arm right) ----


def scores(rng, n, stage2_acc, budget_acc):
    return outcomes(rng, n, stage2_acc).astype(np.int8) - outcomes(rng, n, budget_acc).astype(
        np.int8
    )


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_the_sign_flip_test_of_score_differences_matches_scipys_exact_permutation_test(seed):
    """Two points' score differences run -2..2; the exact sign-flip p-value against scipy's
    permutation test enumerating every sign pattern (few non-zero differences: exact)."""
    from scipy.stats import permutation_test

    from sporeflow.report.decision import sign_flip_p

    rng = np.random.default_rng(seed)
    d = rng.choice([-2, -1, 0, 0, 0, 1, 2], size=40, p=[0.05, 0.1, 0.2, 0.2, 0.2, 0.15, 0.1])
    d = np.where(np.arange(40) < 14, d, 0)  # at most 14 non-zero: 2**14 sign patterns
    reference = permutation_test(
        (d[d != 0],),
        np.sum,
        permutation_type="samples",
        n_resamples=np.inf,
        alternative="two-sided",
    ).pvalue
    assert sign_flip_p(d) == pytest.approx(reference, rel=1e-9)


def test_for_right_or_wrong_outcomes_the_sign_flip_test_is_mcnemars():
    from sporeflow.report.decision import sign_flip_p

    rng = np.random.default_rng(7)
    a, b = outcomes(rng, 500, 0.8), outcomes(rng, 500, 0.74)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    d = a.astype(int) - b.astype(int)
    assert sign_flip_p(d) == pytest.approx(binomtest(only_a, only_a + only_b, 0.5).pvalue)


def test_points_scored_at_equal_cost_are_decided_on_their_pooled_gain_and_its_interval():
    """A point's value is its mean score (its pooled gain at cost); two points' interval is the
    square-and-add (MOVER) of each one's Newcombe interval with their scores' correlation
    (numpy's), within -2..2."""
    rng = np.random.default_rng(11)
    ahead = point("rho=0.4", {s: scores(rng, 3000, 0.9, 0.7) for s in (1, 2)})
    behind = point("rho=0.7", {s: scores(rng, 3000, 0.8, 0.8) for s in (1, 2)})
    decision = decide([behind, ahead])
    pooled = np.concatenate([ahead.outcomes[1], ahead.outcomes[2]])
    assert decision.best is ahead and ahead.accuracy == pytest.approx(pooled.mean())
    assert decision.kind == "winner"
    versus = decision.others[0].against_best
    d = {s: ahead.outcomes[s].astype(int) - behind.outcomes[s].astype(int) for s in (1, 2)}
    n = 6000
    low, high = versus.ci95
    assert versus.diff == pytest.approx(sum(v.sum() for v in d.values()) / n)
    other = np.concatenate([behind.outcomes[1], behind.outcomes[2]])
    (a_low, a_high), (b_low, b_high) = ahead.ci95, behind.ci95
    r = np.corrcoef(pooled, other)[0, 1]
    x, y = pooled.mean(), other.mean()
    below = np.sqrt((x - a_low) ** 2 + (b_high - y) ** 2 - 2 * r * (x - a_low) * (b_high - y))
    above = np.sqrt((a_high - x) ** 2 + (y - b_low) ** 2 - 2 * r * (a_high - x) * (y - b_low))
    assert (low, high) == pytest.approx((x - y - below, x - y + above), abs=1e-9)
    assert -2.0 <= low < versus.diff < high <= 2.0
    even = decide(
        [point("a", {1: scores(rng, 50, 0.8, 0.8)}), point("b", {1: scores(rng, 50, 0.8, 0.8)})]
    )
    assert even.kind == "tie"


@pytest.mark.parametrize("n", [0, 1, 7, 1500, 20000])
def test_the_fair_coins_binomial_matches_scipys(n):
    """decision.fair_coin_pmf (log-gamma, no scipy import at a sweep's end) against
    scipy.stats.binom.pmf, including test sets whose 2**-n underflows a float."""
    from scipy.stats import binom

    from sporeflow.report.decision import fair_coin_pmf

    ours, theirs = fair_coin_pmf(n), binom.pmf(np.arange(n + 1), n, 0.5)
    assert ours.sum() == pytest.approx(1.0, rel=1e-9)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-300)
