"""Whether a sweep has a winner: its points compared on their per-image outcomes, so that a
lead smaller than the noise of the test images is called a tie, not a best.

A *point* is a sweep job's settings without its seed; its jobs are its seeds. Two points are
compared paired within a seed (the same seed trained the same stage 1 and evaluates the same
test images) and stratified across seeds: the difference in accuracy is the pooled difference
over every common seed's images, its 95% interval Newcombe's paired interval on those images
pooled (report.intervals), its p-value the exact McNemar test on the discordant images of all
seeds (the conditional test of matched pairs in strata). A point's own interval is Wilson's on
its pooled images. The best point (highest pooled accuracy) is compared with every other point, the
p-values Holm-corrected: it is the *winner* when it is better than every other at 5%, else the
points it cannot be told from *tie* with it.

The gain at equal cost is decided the same way on a per-image *score*, stage 2 right minus the
budget arm right (-1, 0, 1; every point has its own budget arm): a point's value is its mean
score (its pooled `gain_at_cost`), two points' per-image differences run -2 .. 2, and the exact
test is the sign-flip test, which is McNemar's for right/wrong outcomes.

The *leader* (the point a sweep names, tags, ranks first and registers: `lead`, the one rule
every output reads) is the winner when there is one. In a tie it is never the first by job
order: among the points the decision cannot tell apart (the best and those tied with it; on a
sweep of accuracy and cost, only those also on its front) it is the cheapest by the sweep's
cost measure (its `sweep.objective` cost, else a job's `cost/passes`, a pipeline's
`stage2/passes`); when the cheapest cost is shared (or a cost is missing) there is no leader,
and nothing is registered. Why the cheapest: the validation cannot tell them apart, so the
only thing left that differs for sure is what they cost, and a cost is counted by a rule
(engine.cost), exact, with nothing left to chance.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from sporeflow.report.intervals import difference_interval, mean_interval

ALPHA = 0.05
BEST = object()  # Decision.records' default leader: the best point (a caller without `lead`)


@dataclass(frozen=True)
class Stratified:
    """The first of two points against the second, over the seeds both ran: per common seed,
    the two points' outcomes on its images (right/wrong, or scores such as stage 2 minus the
    budget arm)."""

    pairs: tuple[tuple[np.ndarray, np.ndarray], ...]

    @property
    def strata(self) -> tuple[np.ndarray, ...]:
        """Per common seed, the per-image differences (right/wrong: -1, 0, 1; scores: -2 .. 2)."""
        return tuple(a.astype(np.int64) - b.astype(np.int64) for a, b in self.pairs)

    @property
    def n(self) -> int:
        return sum(int(d.size) for d in self.strata)

    @property
    def images(self) -> int:
        """How many more images the first point gets right (in score units), over all seeds."""
        return sum(int(d.sum()) for d in self.strata)

    @property
    def diff(self) -> float:
        return self.images / self.n if self.n else 0.0

    @property
    def ci95(self) -> tuple[float, float]:
        """Every common seed's images pooled, as the p-value pools them: Newcombe's paired
        interval for right/wrong, its square-and-add for scores (report.intervals)."""
        return difference_interval(*_pooled(self.pairs))

    @property
    def p_value(self) -> float:
        """Exact two-sided sign-flip test on the per-image differences of every seed: under
        no difference each image's difference is as likely negated. For right/wrong outcomes
        it is the exact McNemar test on the discordant images."""
        return sign_flip_p(np.concatenate(self.strata) if self.strata else np.zeros(0, int))


def _pooled(pairs) -> tuple[np.ndarray, np.ndarray]:
    """Every seed's images one after another, for each side (empty without a common seed)."""
    if not pairs:
        return np.zeros(0, bool), np.zeros(0, bool)
    return np.concatenate([a for a, _ in pairs]), np.concatenate([b for _, b in pairs])


def sign_flip_p(differences: np.ndarray) -> float:
    """P(|S| >= |observed sum|) where S flips each difference's sign at random; the differences
    are integers of magnitude 1 or 2 (exact: two binomials convolved)."""
    d = np.asarray(differences, dtype=np.int64)
    if np.abs(d).max(initial=0) > 2:
        raise ValueError("per-image differences beyond -2..2")
    n1, n2 = int((np.abs(d) == 1).sum()), int((np.abs(d) == 2).sum())
    if n1 + n2 == 0:
        return 1.0
    # S = (2 i - n1) + 2 (2 j - n2): i of the n1 ones and j of the n2 twos positive
    pmf = np.zeros(2 * n1 + 4 * n2 + 1)
    ones = fair_coin_pmf(n1)
    for j, weight in enumerate(fair_coin_pmf(n2)):
        offset = 4 * j  # S + n1 + 2 n2 = 2 i + 4 j
        pmf[offset : offset + 2 * n1 + 1 : 2] += weight * ones
    values = np.arange(pmf.size) - (n1 + 2 * n2)
    observed = abs(int(d.sum()))
    return float(min(1.0, pmf[np.abs(values) >= observed].sum()))


def fair_coin_pmf(n: int) -> np.ndarray:
    """P(K = k) for k = 0..n, K ~ Binomial(n, 1/2), from log-gamma: no underflow for large n,
    and no import of scipy.stats (0.4 s at every sweep's end; the tests compare with scipy)."""
    lgamma = np.vectorize(math.lgamma, otypes=[float])
    k = np.arange(n + 1)
    return np.exp(lgamma(n + 1) - lgamma(k + 1) - lgamma(n - k + 1) - n * math.log(2))


def stratified(first: dict[int, np.ndarray], second: dict[int, np.ndarray]) -> Stratified:
    """Two points' per-image outcomes by seed (seed -> right/wrong, or a score, per test image)."""
    common = sorted(set(first) & set(second))
    for s in common:
        if first[s].shape != second[s].shape:
            raise ValueError(
                f"paired results of different lengths: {first[s].shape} vs {second[s].shape}"
            )
    return Stratified(tuple((first[s], second[s]) for s in common))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given."""
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass
class Point:
    """One setting of a sweep: its label, and per seed the job and its per-image outcomes."""

    label: str
    jobs: dict[int, int] = field(default_factory=dict)  # seed -> job number
    outcomes: dict[int, np.ndarray] = field(default_factory=dict)  # seed -> right (or score)

    @property
    def accuracy(self) -> float:
        right = sum(int(o.sum()) for o in self.outcomes.values())
        total = sum(o.size for o in self.outcomes.values())
        return right / total if total else math.nan

    @property
    def seeds(self) -> list[int]:
        return sorted(self.outcomes)

    @property
    def ci95(self) -> tuple[float, float]:
        """The pooled accuracy's (or score's) 95% interval, every seed's images concatenated:
        Wilson's for right/wrong, Newcombe's paired one for a score (report.intervals)."""
        if not sum(o.size for o in self.outcomes.values()):
            return math.nan, math.nan
        return mean_interval(np.concatenate([self.outcomes[s] for s in self.seeds]))


@dataclass
class Versus:
    point: Point
    against_best: Stratified
    p_holm: float

    @property
    def worse(self) -> bool:
        """Shown worse than the best at 5% after Holm's correction."""
        return self.p_holm < ALPHA and self.against_best.images > 0


@dataclass
class Decision:
    best: Point
    others: list[Versus]

    @property
    def kind(self) -> str:
        return "winner" if self.others and all(v.worse for v in self.others) else "tie"

    @property
    def tied(self) -> list[Point]:
        return [v.point for v in self.others if not v.worse]

    @property
    def undecided(self) -> list[Point]:
        """The points the decision cannot tell apart: the best and those tied with it."""
        return [self.best, *self.tied]

    def records(self, leader: Point | None | object = BEST) -> list[dict]:
        """One dict per point, the leader first (`lead`; None: no leader, no row says
        leading; by default the best), then by accuracy: its
        seeds and jobs, pooled accuracy and 95% interval, its difference from the best with
        interval and Holm p, and the verdict (`winner` or `leading` for the leader, `worse` or
        `tie` for the rest)."""
        lead = "winner" if self.kind == "winner" else "leading"
        unpaired = dict.fromkeys(("vs_best", "vs_best_low", "vs_best_high", "p_holm"), math.nan)
        found = [_point_record(self.best) | unpaired | {"verdict": "tie"}]
        for v in sorted(self.others, key=lambda v: -v.point.accuracy):
            low, high = v.against_best.ci95
            found.append(
                _point_record(v.point)
                | {"vs_best": -v.against_best.diff, "vs_best_low": -high, "vs_best_high": -low}
                | {"p_holm": v.p_holm, "verdict": "worse" if v.worse else "tie"}
            )
        if leader is BEST:
            leader = self.best
        if leader is None:
            return found
        first = next(r for r in found if r["point"] == leader.label)
        first["verdict"] = lead
        return [first, *(r for r in found if r is not first)]

    def rows(
        self, objective: str, leader: Point | None | object = BEST
    ) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of `records(leader)` as text."""
        header = ["point", "seeds", "jobs", objective, "95% CI", "vs best", "95% CI", "p Holm"]
        rows = []
        for r in self.records(leader):
            compared = not math.isnan(r["vs_best"])
            rows.append(
                [r["point"], ",".join(map(str, r["seeds"])), ",".join(map(str, r["jobs"]))]
                + [f"{r['value']:.4f}", f"{r['ci_low']:.4f}..{r['ci_high']:.4f}"]
                + (
                    [f"{r['vs_best']:+.4f}", f"{r['vs_best_low']:+.4f}..{r['vs_best_high']:+.4f}"]
                    + [f"{r['p_holm']:.3g}"]
                    if compared
                    else ["-", "-", "-"]
                )
                + [r["verdict"]]
            )
        return [*header, "verdict"], rows

    def line(self, objective: str, split: str = "validation") -> str:
        """The verdict in one line; `split`: which images decided (validation, or test when a
        sweep had no validation split)."""
        seeds = len(self.best.seeds)
        images = sum(o.size for o in self.best.outcomes.values()) // max(seeds, 1)
        evidence = f"(Holm, {seeds} seed{'s' * (seeds != 1)}, {images} {split} images each)"
        best = f"{self.best.label} ({objective} {self.best.accuracy:.4f})"
        if not self.others:
            return f"tie: only one point, {best}: nothing to compare it with"
        if self.kind == "winner":
            return f"winner: {best}, better than every other point at 5% {evidence}"
        tied = sorted(self.tied, key=lambda p: -p.accuracy)  # the order of the rows above
        names = ", ".join(f"{p.label} ({p.accuracy:.4f})" for p in tied)
        return (
            f"tie: {best} cannot be told apart from {names} at 5% {evidence}; "
            f"more seeds or {split} images may decide"
        )


@dataclass(frozen=True)
class Leader:
    """The point a sweep names as its answer (None: no leader) and why, in words a user reads:
    every output of a sweep (console, files, parent tags, compare, results, the saved view's
    order, the registered version, the front's line) says this one."""

    point: Point | None
    reason: str

    @property
    def label(self) -> str:
        return self.point.label if self.point is not None else "none"

    def line(self) -> str:
        """`leader: <point> (<why>)`, or `leader: none (<why>); nothing registered`."""
        if self.point is None:
            return f"leader: none ({self.reason}); nothing registered"
        return f"leader: {self.point.label} ({self.reason})"


def _same_cost(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def lead(
    decision: Decision,
    costs: dict[str, float],
    cost_name: str,
    front: set[str] | None = None,
) -> Leader:
    """The leader by the one rule (module docstring): the winner; else the cheapest (by
    `costs`, point label -> `cost_name`) of the points the decision cannot tell apart, those
    on the `front` only when the sweep has one; no leader when that cost is shared or unknown."""
    if decision.kind == "winner" and (front is None or decision.best.label in front):
        return Leader(decision.best, "better than every other point at 5%")
    candidates = decision.undecided
    if front is not None:
        candidates = [p for p in candidates if p.label in front]
        if not candidates:
            return Leader(None, "no point the validation cannot tell from the best is on the front")
    told = f"{len(candidates)} points the validation cannot tell apart"
    if front is not None:
        told += " that are on the front"
    if len(candidates) == 1:
        alone = " on the front" if front is not None else ""
        return Leader(
            candidates[0], f"the only point{alone} the validation cannot tell from the best"
        )
    missing = [p.label for p in candidates if not math.isfinite(costs.get(p.label, math.nan))]
    if missing:
        return Leader(None, f"{told}, and {missing[0]} has no {cost_name} to choose by")
    cheapest = min(candidates, key=lambda p: costs[p.label])
    low = costs[cheapest.label]
    sharing = [p for p in candidates if _same_cost(costs[p.label], low)]
    if len(sharing) > 1:
        return Leader(
            None, f"{told}; {len(sharing)} of them share the lowest {cost_name}, {low:.6g}"
        )
    return Leader(cheapest, f"the cheapest of the {told}: {cost_name} {low:.6g}")


def _point_record(point: Point) -> dict:
    low, high = point.ci95
    seeds = point.seeds
    jobs = [point.jobs[s] for s in seeds]
    return {
        "point": point.label,
        "seeds": seeds,
        "jobs": jobs,
        "value": point.accuracy,
        "ci_low": low,
        "ci_high": high,
    }


def decide(points: list[Point]) -> Decision | None:
    """The best point (highest pooled accuracy) against every other; None without outcomes."""
    scored = [p for p in points if p.outcomes]
    if not scored:
        return None
    best = max(scored, key=lambda p: p.accuracy)
    others = [p for p in scored if p is not best]
    versus = [stratified(best.outcomes, p.outcomes) for p in others]
    adjusted = holm([v.p_value if v.strata else 1.0 for v in versus])
    return Decision(
        best, [Versus(p, v, q) for p, v, q in zip(others, versus, adjusted, strict=True)]
    )
