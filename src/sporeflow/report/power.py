"""How small a difference a sweep's data can decide, said before the sweep spends its time: the
smallest difference in accuracy between two points that the decision's test (report.decision:
the exact McNemar test on the images only one of them gets right, seeds pooled by concatenating
their images, rejecting at p < ALPHA) finds with 80% power. A smaller true difference mostly
reads as a tie; more seeds or validation images resolve less.

The model of two points on N paired images (N = validation images x seeds): the better scores
`accuracy` p, the other p - d, and their errors are independent, so an image is right by the
first only with p10 = p (1 - p + d) and by the second only with p01 = (1 - p)(p - d); the
discordant proportion is psi = p10 + p01 and the difference p10 - p01 = d. Networks trained from
the same start usually err on the same images (fewer discordant images than independence
gives), so the figure is on the cautious side: such points are told apart at smaller d.

Two sample-size rules on that model:
- `connor_pairs`: Connor's (R. J. Connor, "Sample size for testing differences in proportions
  for the paired-sample design", Biometrics 43:207-211, 1987, p. 209), the normal approximation
  N = (z_{1-a/2} sqrt(psi) + z_{power} sqrt(psi - d^2))^2 / d^2 - the published reference;
- `exact_power`: the power of the exact conditional test itself, summed over the number of
  discordant images m ~ Binomial(N, psi), the first point's share of them b ~ Binomial(m,
  p10 / psi), and the test's two-sided rejection region at each m (as in Duffy, Biometrics
  40:1005, 1984; Suissa and Shuster, Biometrics 47:361, 1991). The exact test is conservative:
  at Connor's difference its power is about 0.77, not 0.8, so the difference said is the exact
  test's (`detectable_difference`), found by a root search that starts at Connor's.

scipy.special only (its binomial distribution functions, in C): no scipy.stats or
scipy.optimize, which cost seconds to import at a sweep's start.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import special

from sporeflow.report.decision import ALPHA

POWER = 0.8
ASSUMED_ACCURACY = (0.9, 0.99)  # no point has an accuracy before the sweep: two levels said
NONE = "none"  # what a line says where no difference is resolved
_TOLERANCE = 1e-3  # of the root search, relative: a difference is said to two digits


def discordant(accuracy: float, difference: float) -> tuple[float, float]:
    """(p10, p01): the share of images right by the better point only, and by the other only,
    when the better scores `accuracy`, the other `accuracy - difference`, errors independent."""
    other = accuracy - difference
    return accuracy * (1 - other), (1 - accuracy) * other


def connor_pairs(p10: float, p01: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Connor's (1987) number of pairs for a two-sided McNemar test at `alpha` to detect
    p10 - p01 with `power` (a float: round it up)."""
    psi, d = p10 + p01, p10 - p01
    z_alpha, z_power = special.ndtri(1 - alpha / 2), special.ndtri(power)
    return float((z_alpha * math.sqrt(psi) + z_power * math.sqrt(psi - d * d)) ** 2 / d**2)


def connor_difference(
    pairs: int, accuracy: float, alpha: float = ALPHA, power: float = POWER
) -> float:
    """The difference Connor's rule says `pairs` images detect (its number of pairs inverted by
    bisection: it falls as the difference grows); nan when no difference up to `accuracy` is."""
    return _first_reaching(
        lambda d: pairs - connor_pairs(*discordant(accuracy, d), alpha, power), 0.0, accuracy
    )


def critical_counts(m: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Per number of discordant images m, the largest count c of one side that the exact
    two-sided McNemar test rejects (2 P(K <= c) < alpha, K ~ Binomial(m, 1/2)); -1: none."""
    m = np.asarray(m, np.int64)
    guess = np.floor(m / 2 - special.ndtri(1 - alpha / 2) * np.sqrt(m) / 2 - 0.5)
    c = np.clip(guess.astype(np.int64), -1, m)
    for _ in range(16):  # the normal approximation is within a few counts of the exact one
        up = (c + 1 <= m) & (2 * _cdf(c + 1, m, 0.5) < alpha)
        down = (c >= 0) & (2 * _cdf(c, m, 0.5) >= alpha)
        if not (up.any() or down.any()):
            return c
        c = c + up - down
    raise ArithmeticError("the exact McNemar test's critical counts did not settle")


def _cdf(k: np.ndarray, n: np.ndarray, p: float) -> np.ndarray:
    """P(K <= k), K ~ Binomial(n, p); 0 for k < 0 and 1 for k >= n."""
    k, n = np.broadcast_arrays(np.asarray(k, np.int64), np.asarray(n, np.int64))
    inside = (k >= 0) & (k < n)
    found = np.where(k >= n, 1.0, 0.0)
    found[inside] = special.bdtr(k[inside], n[inside], p)
    return found


def exact_power(pairs: int, accuracy: float, difference: float, alpha: float = ALPHA) -> float:
    """The chance that the decision's exact McNemar test on `pairs` images finds two points
    apart (p < alpha), the better at `accuracy`, the other `difference` below, errors
    independent: sum over m discordant images of P(m) P(reject | m)."""
    p10, p01 = discordant(accuracy, difference)
    psi = p10 + p01
    if pairs <= 0 or psi <= 0:
        return 0.0
    share = p10 / psi
    m = _likely_counts(pairs, psi)
    log_pmf = (
        special.gammaln(pairs + 1)
        - special.gammaln(m + 1)
        - special.gammaln(pairs - m + 1)
        + special.xlogy(m, psi)
        + special.xlog1py(pairs - m, -psi)
    )
    c = critical_counts(m, alpha)
    reject = _cdf(c, m, share) + (1 - _cdf(m - c - 1, m, share))  # b <= c or b >= m - c
    return float(min(1.0, np.sum(np.exp(log_pmf) * np.where(c >= 0, reject, 0.0))))


def _likely_counts(pairs: int, psi: float) -> np.ndarray:
    """The numbers of discordant images that carry all but ~1e-30 of Binomial(pairs, psi)."""
    mean, sd = pairs * psi, math.sqrt(pairs * psi * (1 - psi)) + 1
    low, high = max(0, math.floor(mean - 12 * sd)), min(pairs, math.ceil(mean + 12 * sd))
    return np.arange(low, high + 1, dtype=np.int64)


def detectable_difference(
    images: int,
    seeds: int = 1,
    accuracy: float = ASSUMED_ACCURACY[0],
    alpha: float = ALPHA,
    power: float = POWER,
) -> float:
    """The smallest difference in accuracy between two points that `images` validation images
    x `seeds` seeds (pooled: images x seeds pairs) find with `power` by the decision's exact
    McNemar test at `alpha`, the better point at `accuracy` (errors independent); nan when no
    difference up to `accuracy` is found that often (too few images)."""
    pairs = int(images) * int(seeds)
    start = connor_difference(pairs, accuracy, alpha, power)
    low = 0.0 if math.isnan(start) else 0.5 * start
    return _first_reaching(lambda d: exact_power(pairs, accuracy, d, alpha) - power, low, accuracy)


def _first_reaching(margin, low: float, high: float) -> float:
    """The smallest d in (low, high] with margin(d) >= 0, found by stepping up from `low` by 5%
    of the range left (the exact power is not strictly monotone: the test is discrete), then
    bisecting the step that crosses; nan when margin(high) < 0."""
    if margin(high) < 0:
        return math.nan
    below, step = low, (high - low) / 20
    above = min(high, below + step)
    while margin(above) < 0:
        below, above = above, min(high, above + step)
    while above - below > _TOLERANCE * above:
        middle = (below + above) / 2
        below, above = (below, middle) if margin(middle) >= 0 else (middle, above)
    return above


@dataclass(frozen=True)
class Option:
    """A way to resolve less: its words (`3 seeds`, `dataset.val_split=0.2 (287 images)`) and
    the images and seeds it gives."""

    words: str
    images: int
    seeds: int


def power_line(
    images: int,
    seeds: int,
    split: str = "validation",
    options: Sequence[Option] = (),
    levels: Sequence[float] = ASSUMED_ACCURACY,
) -> str:
    """The sweep's statement before its first job: the difference its `images` x `seeds`
    resolve between two points near the first assumed accuracy level (the other levels' in
    parentheses), and what each option would resolve."""
    first, *rest = _resolved(images, seeds, levels)
    others = "".join(f"{f} near {level:g}; " for f, level in zip(rest, levels[1:], strict=True))
    what, rest_read = (
        ("no difference in accuracy", "every difference reads as a tie")
        if first == NONE
        else (f"differences in accuracy of {first} or more", "smaller ones read as ties")
    )
    head = (
        f"[sporeflow] sweep: {images} {split} images x {seeds} seed{'s' * (seeds != 1)} resolve "
        f"{what} between two points near {levels[0]:g} ({others}{POWER:.0%} power, exact "
        f"McNemar at alpha {ALPHA:g}, independent errors assumed); {rest_read}"
    )
    more = []
    for option in options:
        figure, *also = _resolved(option.images, option.seeds, levels)
        more.append(f"{option.words} {figure}" + (f" ({', '.join(also)})" if also else ""))
    return f"{head}; would resolve: {', '.join(more)}" if more else head


def _resolved(images: int, seeds: int, levels: Sequence[float]) -> list[str]:
    """The detectable difference at each accuracy level, as said (two significant digits;
    `none` when nothing is resolved)."""
    found = (detectable_difference(images, seeds, level) for level in levels)
    return [NONE if math.isnan(d) else f"{d:.2g}" for d in found]
