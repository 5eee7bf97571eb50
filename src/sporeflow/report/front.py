"""Accuracy and cost together: a sweep's Pareto front, decided with the paired tests and Holm's
correction of a single objective (report.decision), so that a lead smaller than the noise of
the validation images does not keep a dearer point on the front.

Every point has its per-image outcomes per seed (report.decision.Point) and a cost: the mean of
its jobs' costs (`cost/passes`, a pipeline's `stage2/passes`). A cost is counted by a rule, the
same for the same settings on any machine (engine.cost), so it is taken as exact: no test.

Point A *beats* point B when
- A is cheaper (lower cost) and not worse in accuracy at 5% (B is not shown more accurate than
  A), or
- A is more accurate at 5% and no dearer (cost at most B's).

"At 5%" is the exact paired test of report.decision (stratified over the common seeds: the
sign-flip test, McNemar's for right/wrong) on every pair of points, Holm-corrected over all
those pairs: every pair may decide whether one beats the other. A pair without a common seed
is not compared: neither beats the other. The *front* is the points no other point beats; every
other point is named with the point that beats it (one on the front when there is one, else the
most accurate) and that pair's Holm p.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

from sporeflow.report.decision import ALPHA, Point, Stratified, holm, stratified

CHEAPER = "cheaper, not worse"
MORE_ACCURATE = "more accurate, no dearer"
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pair:
    """Two points compared: `first` against `second`, Holm-adjusted over the front's pairs."""

    first: Point
    second: Point
    test: Stratified
    p_holm: float

    def better(self, point: Point) -> bool:
        """`point` (one of the two) shown more accurate than the other at 5%."""
        ahead = self.test.images if point is self.first else -self.test.images
        return self.p_holm < ALPHA and ahead > 0


@dataclass(frozen=True)
class Beaten:
    point: Point
    by: Point
    how: str  # CHEAPER or MORE_ACCURATE
    p_holm: float  # the Holm p of the pair (large for CHEAPER: not shown worse; small for the rest)


@dataclass
class Front:
    front: list[Point]  # cheapest first
    beaten: list[Beaten]  # in the order of their points' cost
    costs: dict[str, float]  # point label -> cost
    cost_name: str = "cost"

    def line(self, objective: str = "acc") -> str:
        """`front: <point> (acc 0.xxxx, cost N), ...`, cheapest first."""
        shown = ", ".join(
            f"{p.label} ({objective} {p.accuracy:.4f}, {self.cost_name} {_cost(self.costs[p.label])})"
            for p in self.front
        )
        return f"front: {shown}"

    def beaten_lines(self) -> list[str]:
        """One per point off the front: which point beats it, how, at what Holm p."""
        found = []
        for b in self.beaten:
            if b.how == CHEAPER:
                why = f"cheaper, not worse: p={b.p_holm:.3g}"
            else:
                why = f"more accurate: p={b.p_holm:.3g}, no dearer"
            found.append(f"{b.point.label}: beaten by {b.by.label} ({why})")
        return found

    def records(self) -> list[dict]:
        """One dict per point, cheapest first: its seeds, jobs, pooled accuracy and 95%
        interval, cost, whether on the front, and else what beats it, how and at what p."""
        by_point = {b.point.label: b for b in self.beaten}
        rows = []
        for point in sorted(
            [*self.front, *(b.point for b in self.beaten)],
            key=lambda p: (self.costs[p.label], -p.accuracy),
        ):
            low, high = point.ci95
            b = by_point.get(point.label)
            rows.append(
                {
                    "point": point.label,
                    "seeds": point.seeds,
                    "jobs": [point.jobs[s] for s in point.seeds],
                    "value": point.accuracy,
                    "ci_low": low,
                    "ci_high": high,
                    "cost": self.costs[point.label],
                    "front": b is None,
                    "beaten_by": "" if b is None else b.by.label,
                    "how": "" if b is None else b.how,
                    "p_holm": math.nan if b is None else b.p_holm,
                }
            )
        return rows

    def rows(self, objective: str) -> tuple[list[str], list[list[str]]]:
        """(header, rows) of `records()` as text: the table on the parent (front.csv)."""
        header = ["point", "seeds", "jobs", objective, "95% CI", self.cost_name, "front"]
        header += ["beaten by", "how", "p Holm"]
        rows = []
        for r in self.records():
            rows.append(
                [r["point"], ",".join(map(str, r["seeds"])), ",".join(map(str, r["jobs"]))]
                + [f"{r['value']:.4f}", f"{r['ci_low']:.4f}..{r['ci_high']:.4f}"]
                + [_cost(r["cost"]), "yes" if r["front"] else "no", r["beaten_by"] or "-"]
                + [r["how"] or "-", "-" if math.isnan(r["p_holm"]) else f"{r['p_holm']:.3g}"]
            )
        return header, rows


def _cost(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.4g}"


def _cheaper(a: float, b: float) -> bool:
    return a < b and not math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _no_dearer(a: float, b: float) -> bool:
    return a <= b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def pairs(points: list[Point]) -> list[Pair]:
    """Every pair of points with a common seed, tested and Holm-corrected together."""
    tested = [
        (a, b, stratified(a.outcomes, b.outcomes))
        for i, a in enumerate(points)
        for b in points[i + 1 :]
    ]
    tested = [(a, b, t) for a, b, t in tested if t.strata]
    adjusted = holm([t.p_value for _, _, t in tested])
    return [Pair(a, b, t, q) for (a, b, t), q in zip(tested, adjusted, strict=True)]


def beats(pair: Pair, a: Point, costs: dict[str, float]) -> str | None:
    """How `a` (one of the pair) beats the other (CHEAPER, MORE_ACCURATE), or None."""
    b = pair.second if a is pair.first else pair.first
    ca, cb = costs[a.label], costs[b.label]
    if pair.better(a) and _no_dearer(ca, cb):
        return MORE_ACCURATE
    if _cheaper(ca, cb) and not pair.better(b):
        return CHEAPER
    return None


def front(points: list[Point], costs: dict[str, float], cost_name: str = "cost") -> Front | None:
    """The Pareto front of the points with outcomes and a finite cost; None without any."""
    scored = [
        p
        for p in points
        if p.outcomes and p.label in costs and math.isfinite(costs.get(p.label, math.nan))
    ]
    if not scored:
        return None
    beaters: dict[str, list[tuple[Point, str, float]]] = {p.label: [] for p in scored}
    for pair in pairs(scored):
        for a, b in ((pair.first, pair.second), (pair.second, pair.first)):
            how = beats(pair, a, costs)
            if how is not None:
                beaters[b.label].append((a, how, pair.p_holm))
    on_front = [p for p in scored if not beaters[p.label]]
    labels = {p.label for p in on_front}
    beaten = []
    for p in scored:
        if not beaters[p.label]:
            continue
        by, how, q = min(
            beaters[p.label],
            key=lambda x: (x[0].label not in labels, -x[0].accuracy, costs[x[0].label]),
        )
        beaten.append(Beaten(p, by, how, q))
    order = {p.label: (costs[p.label], -p.accuracy) for p in scored}
    return Front(
        sorted(on_front, key=lambda p: order[p.label]),
        sorted(beaten, key=lambda b: order[b.point.label]),
        {p.label: costs[p.label] for p in scored},
        cost_name,
    )


FIGURE = "front.png"
TABLE = "front.csv"
METRIC_PREFIX = "front/"  # front/<row>/acc|ci_low|ci_high|cost|on_front, row of front.csv


def metrics(found: Front) -> dict[str, float]:
    """Per point, by its row in `records()` (front.csv, from 0, cheapest first): its accuracy
    and interval, its cost, whether it is on the front; and the front's size."""
    out = {f"{METRIC_PREFIX}size": float(len(found.front))}
    for row, r in enumerate(found.records()):
        for name in ("value", "ci_low", "ci_high", "cost"):
            out[f"{METRIC_PREFIX}{row}/{'acc' if name == 'value' else name}"] = float(r[name])
        out[f"{METRIC_PREFIX}{row}/on_front"] = 1.0 if r["front"] else 0.0
    return out


def figure(found: Front, path, objective: str = "accuracy"):
    """Accuracy (95% interval) against cost: every point, the front's drawn as a step line and
    labelled; None (a warning) if the figure cannot be drawn: it never fails a sweep."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        from sporeflow.report.comparison import save_figure

        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for r in found.records():
            colour = "#2a7" if r["front"] else "#999"
            ax.errorbar(
                [r["cost"]],
                [r["value"]],
                yerr=[[r["value"] - r["ci_low"]], [r["ci_high"] - r["value"]]],
                fmt="o",
                capsize=3,
                color=colour,
            )
            ax.annotate(
                r["point"],
                (r["cost"], r["value"]),
                fontsize=7,
                xytext=(4, 4),
                textcoords="offset points",
                color="#333" if r["front"] else "#777",
            )
        on = sorted(found.front, key=lambda p: found.costs[p.label])
        ax.step(
            [found.costs[p.label] for p in on],
            [p.accuracy for p in on],
            where="post",
            color="#2a7",
            label=f"front ({len(on)} of {len(found.front) + len(found.beaten)} points)",
        )
        ax.set_xlabel(found.cost_name)
        ax.set_ylabel(f"{objective} (validation, 95% CI)")
        ax.set_title(
            "beaten: cheaper and not worse, or more accurate and no dearer (Holm, 5%)", fontsize=8
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a figure must not fail a finished sweep
        log.warning("front figure failed: %s", ex)
        return None
