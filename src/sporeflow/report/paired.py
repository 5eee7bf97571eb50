"""How sure a comparison of two stages is, from their paired per-example results on the same
eval split: the difference in images and in accuracy with a 95% interval, and the exact McNemar
test on the discordant pairs. With 360 eval images a gain of 0.003 is one image: this says so.

Interval: the Wald interval of a difference of paired proportions (Agresti, Categorical Data
Analysis, 10.1): d = (b - c) / n, Var(d) = ((b + c) - (b - c)^2 / n) / n^2, where b = images only
the first got right and c = images only the second got right. McNemar exact: two-sided binomial
test of b against b + c trials at p = 1/2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

Z95 = 1.959963984540054


@dataclass(frozen=True)
class PairedComparison:
    n: int  # eval images
    only_first: int  # right by the first stage only
    only_second: int  # right by the second stage only

    @property
    def images(self) -> int:
        """How many more images the first stage gets right."""
        return self.only_first - self.only_second

    @property
    def diff(self) -> float:
        return self.images / self.n

    @property
    def ci95(self) -> tuple[float, float]:
        b, c, n = self.only_first, self.only_second, self.n
        half = Z95 * math.sqrt(max(0.0, (b + c) - (b - c) ** 2 / n)) / n
        return self.diff - half, self.diff + half

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
        return self.p_value < 0.05

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
    return PairedComparison(int(a.size), int((a & ~b).sum()), int((~a & b).sum()))
