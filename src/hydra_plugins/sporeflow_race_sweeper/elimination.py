"""Which points of a race are shown worse after a round: F-race's tests (Birattari, Stuetzle,
Paquete and Varrentrapp, "A racing algorithm for configuring metaheuristics", GECCO 2002; as
irace's `aux.friedman` does it).

The seeds run so far are blocks, the points still in are treatments, each point's objective on
each seed one observation; ranks are taken within a seed (1 = best, ties averaged). With three or
more points, the Friedman test (chi-square, ties corrected) asks whether any point differs; only
if it does (p < alpha) is each point compared with the best (lowest rank sum) by Conover's
post-hoc test (Practical Nonparametric Statistics, 3rd ed., 1999, pp. 369-371; t with
(b-1)(k-1) degrees of freedom) and dropped when worse at alpha. With two points the paired
Wilcoxon signed-rank test decides (exact for small samples). No correction for the several
post-hoc comparisons: that is F-race's rule, and the sweep's own decision at the end (report.
decision) is Holm-corrected.
"""

# (no `from __future__ import annotations`: see the Optuna sweeper)
import math
from dataclasses import dataclass, field
from typing import List

import numpy as np


@dataclass
class Round:
    """A round's verdict over the points still in (indices into the matrix's columns)."""

    kept: List[int]
    dropped: List[int] = field(default_factory=list)
    test: str = ""  # "Friedman" | "Wilcoxon" | "" (nothing to test)
    p_value: float = math.nan
    pairwise: dict = field(default_factory=dict)  # dropped column -> its p against the best


def ranks_within_blocks(scores: np.ndarray) -> np.ndarray:
    """Ranks of each row (seed), 1 = lowest score, ties averaged."""
    from scipy.stats import rankdata

    return rankdata(scores, axis=1)


def conover_p(ranks: np.ndarray, best: int) -> np.ndarray:
    """Conover's two-sided p-value of every column's rank sum against column `best`'s. Where the
    ranks are the same in every block, the variance is zero: a different rank sum is certain."""
    from scipy.stats import t

    b, k = ranks.shape
    sums = ranks.sum(axis=0)
    variance = 2.0 * (b * float((ranks**2).sum()) - float((sums**2).sum())) / ((b - 1) * (k - 1))
    gaps = np.abs(sums - sums[best])
    if variance <= 0.0:
        return np.where(gaps > 0, 0.0, 1.0)
    return 2.0 * t.sf(gaps / math.sqrt(variance), (b - 1) * (k - 1))


def judge(values: np.ndarray, maximize: bool, alpha: float) -> Round:
    """The round's verdict on `values` (seeds x points, every cell finite)."""
    b, k = values.shape
    everyone = list(range(k))
    if k < 2 or b < 2:
        return Round(everyone)
    scores = -values if maximize else values  # rank 1 = the best objective
    if k == 2:
        return _two(scores, alpha)
    from scipy.stats import friedmanchisquare

    p = float(friedmanchisquare(*scores.T).pvalue)
    if not p < alpha:  # NaN (every block tied) keeps everyone too
        return Round(everyone, test="Friedman", p_value=p)
    ranks = ranks_within_blocks(scores)
    sums = ranks.sum(axis=0)
    best = int(np.argmin(sums))
    pairwise = conover_p(ranks, best)
    dropped = [j for j in everyone if sums[j] > sums[best] and pairwise[j] < alpha]
    kept = [j for j in everyone if j not in dropped]
    return Round(kept, dropped, "Friedman", p, {j: float(pairwise[j]) for j in dropped})


def _two(scores: np.ndarray, alpha: float) -> Round:
    from scipy.stats import wilcoxon

    differences = scores[:, 0] - scores[:, 1]
    if not np.any(differences):
        return Round([0, 1], test="Wilcoxon", p_value=1.0)
    p = float(wilcoxon(scores[:, 0], scores[:, 1]).pvalue)
    if not p < alpha:
        return Round([0, 1], test="Wilcoxon", p_value=p)
    worse = 0 if differences.sum() > 0 else 1
    return Round([1 - worse], [worse], "Wilcoxon", p, {worse: p})
