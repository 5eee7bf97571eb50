"""The power statement a sweep makes before its first job (report.power, entry.sweep_power):
Connor's published example, the exact power against a simulation of the decision's own test,
the smallest difference falling with more images and seeds, and the default digits sweep
saying it before its first job."""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from scipy.stats import binom, binomtest

from helpers.sweeps import run_sweep
from helpers.train import REPO
from sporeflow.report import power
from sporeflow.report.decision import ALPHA, stratified

DRAWS = 4000  # Monte-Carlo power: standard error at most 0.008


def simulated_power(images, seeds, accuracy, difference, test, rng) -> float:
    """The share of DRAWS sweeps of two points (the better right with `accuracy`, the other
    with `accuracy - difference`, independently, per image and seed) that `test` finds apart."""
    found = 0
    for _ in range(DRAWS):
        first = rng.random((seeds, images)) < accuracy
        second = rng.random((seeds, images)) < accuracy - difference
        found += test(first, second)
    return found / DRAWS


def scipy_mcnemar(first, second) -> bool:
    """The exact McNemar test by scipy: the first point's share of the discordant images."""
    only_first, only_second = int((first & ~second).sum()), int((~first & second).sum())
    return _binomtest_rejects(only_first, only_first + only_second)


@functools.cache
def _binomtest_rejects(successes: int, trials: int) -> bool:
    return trials > 0 and binomtest(successes, trials, 0.5).pvalue < ALPHA


def decision_test(first, second) -> bool:
    """The sweep's own test: the points' outcomes by seed, paired and pooled (report.decision)."""
    compared = stratified(dict(enumerate(first)), dict(enumerate(second)))
    return compared.p_value < ALPHA


def within_monte_carlo(found: float, expected: float) -> bool:
    return abs(found - expected) < 4 * math.sqrt(expected * (1 - expected) / DRAWS)


def test_connors_rule_gives_his_published_number_of_pairs():
    """Connor (1987, Biometrics 43:209): p10 = 0.05, p01 = 0.45, two-sided alpha 0.05, power
    0.8 needs 23 pairs (22.01 rounded up, as powerandsamplesize.com's McNemar calculator
    reproduces it)."""
    assert math.ceil(power.connor_pairs(0.05, 0.45, 0.05, 0.8)) == 23
    assert power.connor_pairs(0.05, 0.45, 0.05, 0.8) == pytest.approx(22.0113, abs=1e-3)


def test_the_critical_counts_are_the_exact_tests():
    """Per number of discordant images, the largest count the exact two-sided test rejects,
    against scipy's binomial distribution."""
    m = np.arange(0, 400)
    expected = [int(np.sum(2 * binom.cdf(np.arange(k + 1), k, 0.5) < ALPHA)) - 1 for k in m]
    assert power.critical_counts(m).tolist() == expected


@pytest.mark.parametrize(("images", "seeds", "accuracy"), [(144, 1, 0.9), (144, 3, 0.99)])
def test_the_difference_said_is_found_80_percent_of_the_time(images, seeds, accuracy):
    """At the difference it says, the exact power is 0.8 and a simulation of paired outcomes
    tested by scipy's exact binomial test (one seed) or by the decision's stratified test
    (seeds pooled) finds the points apart 80% of the time, within Monte-Carlo error."""
    difference = power.detectable_difference(images, seeds, accuracy)
    pairs = images * seeds
    assert power.exact_power(pairs, accuracy, difference) == pytest.approx(0.8, abs=0.005)
    test = scipy_mcnemar if seeds == 1 else decision_test
    rng = np.random.default_rng(7)
    found = simulated_power(images, seeds, accuracy, difference, test, rng)
    assert within_monte_carlo(found, 0.8), (difference, found)
    # a tenth smaller difference is found clearly less often: the figure is the smallest
    smaller = simulated_power(images, seeds, accuracy, 0.9 * difference, test, rng)
    assert smaller < 0.8 - 4 * math.sqrt(0.16 / DRAWS), smaller


def test_the_exact_test_needs_a_little_more_than_connors_normal_approximation():
    """Connor's difference, tested exactly, is found less than 80% of the time (the exact test
    is conservative): the difference said is the exact test's, a few percent larger."""
    for pairs in (144, 432, 1437):
        connor = power.connor_difference(pairs, 0.9)
        exact = power.detectable_difference(pairs, 1, 0.9)
        assert power.exact_power(pairs, 0.9, connor) < 0.79
        assert connor < exact < 1.1 * connor


def test_more_images_or_seeds_resolve_less():
    by_images = [power.detectable_difference(n) for n in (30, 72, 144, 287, 720, 1437, 6000)]
    assert by_images == sorted(by_images, reverse=True) and len(set(by_images)) == len(by_images)
    by_seeds = [power.detectable_difference(144, k) for k in range(1, 6)]
    assert by_seeds == sorted(by_seeds, reverse=True) and len(set(by_seeds)) == len(by_seeds)
    # seeds are pooled image by image: 144 images x 3 seeds are 432 pairs
    assert power.detectable_difference(144, 3) == power.detectable_difference(432, 1)
    assert power.detectable_difference(144, 1, 0.99) < power.detectable_difference(144, 1, 0.9)


def test_too_few_images_resolve_nothing_and_say_so():
    assert math.isnan(power.detectable_difference(3))
    line = power.power_line(3, 1)
    assert "resolve no difference in accuracy" in line and "every difference reads as a tie" in line


@pytest.fixture
def digits_sweep(tmp_path, monkeypatch, capsys):
    """The default data set (digits, val_split 0.1: 144 of its 1437 training images held out)
    swept over two learning rates, one seed; a small network keeps the two jobs short."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    base = ["model=mlp", "model.hidden=16", "callbacks.progress_bar=false", "epochs=1"]
    lrs = ("0.05", "0.2")
    jobs = [[f"optimizer.lr={lr}"] for lr in lrs]
    printed_at_first_job = {}

    class Watched(list):
        """The jobs' list: reading the first job reads what was printed until then."""

        def __iter__(self):
            for number, job in enumerate(list.__iter__(self)):
                if number == 0:
                    printed_at_first_job["err"] = capsys.readouterr().err
                yield job

    run_sweep(tmp_path, Watched(jobs), [f"optimizer.lr={','.join(lrs)}"], base=base)
    return printed_at_first_job["err"]


def digits_line() -> str:
    """What the default digits sweep of one seed should say: 144 of 1437 training images held
    out by val_split 0.1, 287 by 0.2."""
    options = [
        power.Option("3 seeds", 144, 3),
        power.Option("dataset.val_split=0.2 (287 images)", 287, 1),
    ]
    return power.power_line(144, 1, "validation", options)


def test_the_default_digits_sweep_says_what_it_can_resolve_before_its_first_job(digits_sweep):
    (line,) = [ln for ln in digits_sweep.splitlines() if "images x" in ln]
    assert line == digits_line()
    assert line.startswith(
        "[sporeflow] sweep: 144 validation images x 1 seed resolve differences in accuracy of "
        "0.13 or more between two points near 0.9 (0.07 near 0.99; 80% power, exact McNemar "
        "at alpha 0.05, independent errors assumed); smaller ones read as ties; would resolve: "
        "3 seeds 0.067 (0.031), dataset.val_split=0.2 (287 images) 0.084 (0.041)"
    ), line


def test_the_manual_shows_the_line_the_digits_sweep_prints():
    page = (REPO / "docs" / "sweeps.md").read_text()
    assert f"    {digits_line()}\n" in page
