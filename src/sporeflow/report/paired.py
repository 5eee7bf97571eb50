"""How sure a comparison of two stages is, from their paired per-example results on the same
eval split: the difference in images and in accuracy with a 95% interval, and the exact McNemar
test on the discordant pairs. With 360 eval images a gain of 0.003 is one image: this says so.

Interval: Newcombe's hybrid score interval for paired data (method 10 of Newcombe 1998,
report.intervals), which stays within [-1, 1] and keeps a width when no image differs. McNemar
exact: two-sided binomial test of b against b + c trials at p = 1/2, where b = images only the
first got right and c = images only the second got right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sporeflow.core.names import StageKind
from sporeflow.report.intervals import newcombe_paired, table

ALPHA = 0.05
BETTER, WORSE, CANNOT_TELL = "better", "worse", "cannot tell"


def verdict(images: int, p_value: float) -> str:
    """The word of one comparison of stage 2 with another arm: better or worse when the exact
    test says so at 5%, else cannot tell (a difference of a few images is not a result)."""
    if p_value < ALPHA and images != 0:
        return BETTER if images > 0 else WORSE
    return CANNOT_TELL


@dataclass(frozen=True)
class Versus:
    """Stage 2 against one other arm on the same images: the difference in accuracy, its 95%
    interval (Newcombe's), the exact p (McNemar's; pooled over seeds, the sign-flip test) and
    how many more images stage 2 got right."""

    other: str
    diff: float
    low: float
    high: float
    p_value: float
    images: int

    def said(self) -> str:
        return (
            f"{verdict(self.images, self.p_value)} {self.diff:+.4f} (95% CI "
            f"{self.low:+.4f}..{self.high:+.4f}, p={self.p_value:.3g})"
        )


def answer_line(compared: list[Versus], where: str, budget: str = StageKind.budget) -> str:
    """The question a pipeline (or a sweep's leader) answers, in one line: stage 2 against
    stage 1 and each baseline at equal epochs, and against the budget arm (`budget`: its name)
    at equal cost, each with its interval, p and verdict word. `where`: which images (and
    which point of a sweep) it was read on. Every console, file and API reads this one line."""
    if not compared:
        return f"answer ({where}): stage 2 was compared with nothing"
    parts = [f"vs {v.other} {v.said()}" for v in compared if v.other != budget] + [
        f"at equal cost vs {v.other} {v.said()}" for v in compared if v.other == budget
    ]
    return f"answer ({where}): stage 2 " + "; ".join(parts)


@dataclass(frozen=True)
class PairedComparison:
    n: int  # eval images
    only_first: int  # right by the first stage only
    only_second: int  # right by the second stage only
    both: int  # right by both (the rest of the n were wrong by both)

    @property
    def images(self) -> int:
        """How many more images the first stage gets right."""
        return self.only_first - self.only_second

    @property
    def diff(self) -> float:
        return self.images / self.n

    @property
    def ci95(self) -> tuple[float, float]:
        """Newcombe's method 10 (report.intervals)."""
        neither = self.n - self.both - self.only_first - self.only_second
        return newcombe_paired(self.both, self.only_first, self.only_second, neither)

    @property
    def p_value(self) -> float:
        """Exact two-sided McNemar p-value (1.0 when no image differs)."""
        m, k = self.only_first + self.only_second, min(self.only_first, self.only_second)
        if m == 0:
            return 1.0
        tail = sum(math.comb(m, i) for i in range(k + 1)) / 2**m
        return min(1.0, 2 * tail)

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA

    def versus(self, other: str) -> Versus:
        low, high = self.ci95
        return Versus(other, self.diff, low, high, self.p_value, self.images)

    def describe(self) -> str:
        low, high = self.ci95
        verdict = "significant at 5%" if self.significant else "not significant at 5%"
        return (
            f"{self.images:+d} images ({self.diff:+.4f}, 95% CI {low:+.4f}..{high:+.4f}), "
            f"McNemar p={self.p_value:.3g}: {verdict}"
        )


def compare_paired(first_correct, second_correct) -> PairedComparison:
    """Two boolean arrays, one entry per eval image in the same order."""
    a, b = np.asarray(first_correct, bool), np.asarray(second_correct, bool)
    if a.shape != b.shape:
        raise ValueError(f"paired results of different lengths: {a.shape} vs {b.shape}")
    both, only_first, only_second, _ = table(a, b)
    return PairedComparison(int(a.size), only_first, only_second, both)
