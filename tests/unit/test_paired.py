"""The paired statistics against references: scipy's exact binomial test (McNemar), Newcombe's
paired interval from the paper's formula (helpers.intervals) and the published worked example
of Agresti, Categorical Data Analysis (3rd ed.), section 11.1: presidential approval of 1600
people at two surveys, table [[794, 150], [86, 570]]."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import binomtest

from helpers.intervals import newcombe_method10
from sporeflow.report.paired import compare_paired


def paired(both, only_first, only_second, neither):
    first = np.array([1] * both + [1] * only_first + [0] * only_second + [0] * neither, bool)
    second = np.array([1] * both + [0] * only_first + [1] * only_second + [0] * neither, bool)
    return compare_paired(first, second)


def test_agresti_worked_example():
    cmp = paired(794, 150, 86, 570)
    assert cmp.n == 1600 and cmp.images == 64
    assert cmp.diff == pytest.approx(944 / 1600 - 880 / 1600)  # 0.59 - 0.55
    low, high = cmp.ci95
    assert (round(low, 3), round(high, 3)) == (0.021, 0.059)  # the book's (Wald's): at 1600
    # images and p near 0.5 Newcombe's interval agrees with it to 3 decimals
    z = (150 - 86) / np.sqrt(150 + 86)
    assert round(z, 2) == 4.17  # the book's McNemar statistic
    assert cmp.p_value < 1e-4 and cmp.significant


@pytest.mark.parametrize(
    "table",
    [
        (300, 3, 1, 56),
        (300, 0, 0, 60),
        (200, 12, 2, 146),
        (10, 5, 5, 0),
        (350, 1, 0, 9),
        (0, 0, 7, 3),
    ],
)
def test_mcnemar_is_scipys_exact_binomial_test(table):
    cmp = paired(*table)
    b, c = table[1], table[2]
    expected = (
        1.0 if b + c == 0 else binomtest(min(b, c), b + c, 0.5, alternative="two-sided").pvalue
    )
    assert cmp.p_value == pytest.approx(expected, rel=1e-12)


def test_interval_is_newcombes_paired_interval_of_the_papers_formula():
    """Newcombe 1998 method 10 written apart (helpers.intervals), on 360 images near 0.95."""
    rng = np.random.default_rng(0)
    for _ in range(20):
        first, second = rng.random(360) < 0.95, rng.random(360) < 0.93
        cmp = compare_paired(first, second)
        table = [int((first & second).sum()), cmp.only_first, cmp.only_second]
        table.append(360 - sum(table))
        assert cmp.ci95 == pytest.approx(newcombe_method10(*table), abs=1e-9)
        assert cmp.diff == pytest.approx(first.mean() - second.mean())


def test_a_one_image_gain_is_not_significant():
    cmp = paired(340, 2, 1, 17)
    assert cmp.images == 1 and not cmp.significant
    assert "not significant at 5%" in cmp.describe() and "+1 images" in cmp.describe()
    with pytest.raises(ValueError, match="different lengths"):
        compare_paired([True], [True, False])
