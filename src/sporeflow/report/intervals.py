"""Every 95% interval sporeflow shows, computed here and only here: the console tables, the
comparison files, the MLflow metrics (`*ci_low`, `*ci_high`), the figures and the reported test
accuracy all read these functions, so they show the same numbers. Every interval stays inside
what its quantity can be ([0, 1] for an accuracy, [-1, 1] for a difference of two) and has a
width wherever an image was scored, including at 0 or 1 and when no image differs: the Wald
interval does neither (0.9931 on 144 images gives 0.9795..1.0066; no differing image gives a
zero-width interval).

- An accuracy (k right of n): Wilson's score interval (Wilson 1927, JASA 22:209).
- A difference of two accuracies on the same images (a, both right; b, only the first;
  c, only the second; d, neither): Newcombe's hybrid score interval for paired data, method 10
  of Newcombe 1998 (Statistics in Medicine 17:2635), the "square-and-add" of each accuracy's
  Wilson interval with their correlation phi corrected as in Fagerland, Lydersen and Laake,
  Statistical Analysis of Contingency Tables (2017), section 8.5.
- A per-image score, stage 2 right minus the budget arm right (-1, 0, 1): its mean is the
  share of +1 less the share of -1, two proportions of the same images, so the same interval
  with a = 0.
- Two such scores' difference (-2 .. 2 per image): the same square-and-add (MOVER, Zou and
  Donner 2008, Statistics in Medicine 27:1693) of the two scores' intervals with the Pearson
  correlation of their per-image scores.

Outcomes are right/wrong when their dtype is bool (predictions.npy holds bool) and scores when
it is an integer (report.sweep_report.scored subtracts the budget arm as int8). Several seeds
are pooled by concatenating their images, as the paired tests pool them (report.decision).
"""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959963984540054  # the standard normal's 97.5% quantile
Interval = tuple[float, float]


def wilson(right: float, n: int) -> Interval:
    """Wilson's 95% score interval of `right` of `n` (a count; a share times `n` is taken as
    one); [0, 1] when nothing was scored."""
    if n <= 0:
        return 0.0, 1.0
    p, z2 = right / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(max(0.0, p * (1 - p)) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def square_and_add(
    first: float, first_ci: Interval, second: float, second_ci: Interval, r: float
) -> Interval:
    """The interval of `first - second` from each one's interval and their correlation `r`
    (MOVER): each side adds in quadrature the distance to the bound that pushes the difference
    that way, less twice the correlated part. Within [low1 - high2, high1 - low2]."""
    down, up = first - first_ci[0], second_ci[1] - second  # what lowers the difference
    rise, fall = first_ci[1] - first, second - second_ci[0]  # what raises it
    diff = first - second
    below = math.sqrt(max(0.0, down * down + up * up - 2 * r * down * up))
    above = math.sqrt(max(0.0, rise * rise + fall * fall - 2 * r * rise * fall))
    return diff - below, diff + above


def paired_phi(both: int, only_first: int, only_second: int, neither: int) -> float:
    """The correlation of two paired right/wrong outcomes as Newcombe's method 10 uses it: phi
    with ad - bc shrunk by n/2 towards zero when positive (0 in between), 0 when a margin is
    empty."""
    n = both + only_first + only_second + neither
    margins = (
        (both + only_first)
        * (only_second + neither)
        * (both + only_second)
        * (only_first + neither)
    )
    if margins == 0:
        return 0.0
    cross = both * neither - only_first * only_second
    shrunk = cross - n / 2 if cross > n / 2 else (0.0 if cross >= 0 else cross)
    return shrunk / math.sqrt(margins)


def newcombe_paired(both: int, only_first: int, only_second: int, neither: int) -> Interval:
    """Newcombe's method 10 for the first accuracy minus the second on the same images;
    [-1, 1] when nothing was scored."""
    n = both + only_first + only_second + neither
    if n <= 0:
        return -1.0, 1.0
    first, second = both + only_first, both + only_second
    r = paired_phi(both, only_first, only_second, neither)
    low, high = square_and_add(first / n, wilson(first, n), second / n, wilson(second, n), r)
    return max(-1.0, low), min(1.0, high)


def is_right_wrong(outcomes: np.ndarray) -> bool:
    """Right/wrong outcomes (bool), not scores (integers)."""
    return np.asarray(outcomes).dtype == np.bool_


def table(first: np.ndarray, second: np.ndarray) -> tuple[int, int, int, int]:
    """The paired 2x2 counts of two right/wrong outcomes: both, only first, only second,
    neither."""
    a, b = np.asarray(first, bool), np.asarray(second, bool)
    return int((a & b).sum()), int((a & ~b).sum()), int((~a & b).sum()), int((~a & ~b).sum())


def mean_interval(outcomes: np.ndarray) -> Interval:
    """A point's accuracy (right/wrong: Wilson) or mean score (-1, 0, 1: Newcombe's method 10 on
    the +1s against the -1s, never both on one image)."""
    values = np.asarray(outcomes)
    if is_right_wrong(values):
        return wilson(int(values.sum()), int(values.size))
    if np.abs(values).max(initial=0) > 1:
        raise ValueError("per-image scores beyond -1..1")
    up, down = int((values == 1).sum()), int((values == -1).sum())
    return newcombe_paired(0, up, down, int(values.size) - up - down)


def difference_interval(first: np.ndarray, second: np.ndarray) -> Interval:
    """The first outcomes' mean minus the second's, image by image the same images: Newcombe's
    method 10 for right/wrong, the square-and-add of the two scores' intervals (Pearson's
    correlation) for scores."""
    a, b = np.asarray(first), np.asarray(second)
    if a.shape != b.shape:
        raise ValueError(f"paired results of different lengths: {a.shape} vs {b.shape}")
    if is_right_wrong(a) and is_right_wrong(b):
        return newcombe_paired(*table(a, b))
    if a.size == 0:
        return -2.0, 2.0
    x, y = a.astype(np.float64), b.astype(np.float64)
    spread = float(x.std() * y.std())
    r = float(((x - x.mean()) * (y - y.mean())).mean()) / spread if spread > 0 else 0.0
    return square_and_add(x.mean(), mean_interval(a), y.mean(), mean_interval(b), r)
