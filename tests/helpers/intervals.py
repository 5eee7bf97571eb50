"""Independent references for report.intervals, written from the papers' formulas and not from
the product code: Wilson's interval as the roots of its quadratic (numpy.roots), and Newcombe's
paired method 10 in the paper's own notation (l2, u2 for the first proportion, l3, u3 for the
second, delta below and epsilon above)."""

from __future__ import annotations

import math

import numpy as np
from scipy.stats import norm

Z = float(norm.ppf(0.975))


def wilson_roots(k: int, n: int) -> tuple[float, float]:
    """The proportions pi with |k/n - pi| = z sqrt(pi (1 - pi) / n): the roots of
    (1 + z^2/n) pi^2 - (2 k/n + z^2/n) pi + (k/n)^2 = 0."""
    p = k / n
    roots = np.sort(np.roots([1 + Z * Z / n, -(2 * p + Z * Z / n), p * p]).real)
    return float(max(roots[0], 0.0)), float(min(roots[1], 1.0))


def newcombe_method10(a: int, b: int, c: int, d: int) -> tuple[float, float]:
    """Newcombe 1998, method 10, for p1 - p2 with p1 = (a+b)/n and p2 = (a+c)/n; phi corrected as
    in Fagerland, Lydersen and Laake (2017), section 8.5: A = ad - bc less n/2 when A > n/2,
    0 for 0 <= A <= n/2, A itself when negative; 0 when a margin is empty."""
    n = a + b + c + d
    p1, p2 = (a + b) / n, (a + c) / n
    l2, u2 = wilson_roots(a + b, n)
    l3, u3 = wilson_roots(a + c, n)
    rows_cols = [a + b, c + d, a + c, b + d]
    if min(rows_cols) == 0:
        phi = 0.0
    else:
        big_a = a * d - b * c
        corrected = big_a - n / 2 if big_a > n / 2 else (0.0 if big_a >= 0 else big_a)
        phi = corrected / math.sqrt(math.prod(rows_cols))
    dl2, du2, dl3, du3 = p1 - l2, u2 - p1, p2 - l3, u3 - p2
    delta = math.sqrt(dl2**2 - 2 * phi * dl2 * du3 + du3**2)
    epsilon = math.sqrt(du2**2 - 2 * phi * du2 * dl3 + dl3**2)
    return p1 - p2 - delta, p1 - p2 + epsilon


def paired_arrays(a: int, b: int, c: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Two right/wrong arrays (bool) with the paired table a (both), b (first only), c (second
    only), d (neither)."""
    first = np.array([1] * a + [1] * b + [0] * c + [0] * d, bool)
    second = np.array([1] * a + [0] * b + [1] * c + [0] * d, bool)
    return first, second
