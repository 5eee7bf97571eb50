"""A sweep's result as a user decides from it: one row per job, sorted by the objective, with
the swept parameters as columns; the gain against each swept parameter; the best job's
per-epoch curves. Used by the sweep's parent run (sporeflow.entry.sweep_run) and `sporeflow compare`.

Reads only the MLflow store: a job's top-level run carries `sweep.run_id`/`sweep.job` tags, its
overrides, its config as params and its comparison metrics (sporeflow.job.runs)."""

from __future__ import annotations

import csv
import io
import logging
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from sporeflow.config import objective
from sporeflow.core.context import short_value
from sporeflow.core.names import (
    FAILURE_TAG,
    FRONT_TAG,
    OVERRIDES_TAG,
    PREDICTIONS,
    PRUNED_TAG,
    SELECTION_TAG,
    STAGE_TAG,
    SWEEP_BEST_RUN_TAG,
    SWEEP_COST_TAG,
    SWEEP_JOB_TAG,
    SWEEP_KEYS_TAG,
    SWEEP_OBJECTIVE_TAG,
    SWEEP_RUN_ID_TAG,
    SWEEP_VIEW_TAG,
    TEST_PREDICTIONS,
    StageKind,
)
from sporeflow.report import front as pareto
from sporeflow.report.comparison import BUDGET, arm_order, save_figure
from sporeflow.report.decision import Decision, Leader, Point, decide, lead, stratified
from sporeflow.report.paired import Versus, answer_line
from sporeflow.tracking.store_reads import StoreReads

log = logging.getLogger(__name__)

ARMS = (
    StageKind.stage1,
    StageKind.stage2,
    StageKind.baseline,
    StageKind.annealed,
    StageKind.snapshot_mean,
    StageKind.budget,
)
# metric columns, in this order, when any job has them: (MLflow key, header). Validation (what
# decides) beside test (what reports); a job recorded before the validation split shows its
# `eval` metrics (read on the test images) as such.
METRIC_COLUMNS = (
    *((f"{split}/{arm}/acc", f"{arm}_{split}") for arm in ARMS for split in ("val", "test")),
    *(
        (f"{split}/{g}", f"{g}_{split}")
        for g in ("gain", "gain_at_cost")
        for split in ("val", "test")
    ),
    ("final/val/acc", "val_acc"),
    ("test/acc", "test_acc"),
    ("final/val/loss", "val_loss"),
    ("test/loss", "test_loss"),
    *((f"{arm}/acc", f"{arm}_eval") for arm in ARMS),
    ("gain", "gain_eval"),
    ("final/acc", "eval_acc"),
)
GAIN = "test/gain"  # the gain a sweep's figures show: on the test images, reported
GAIN_CI = ("test/gain_ci_low", "test/gain_ci_high", "test/gain_p_value")  # reported on test
AT_COST = "gain_at_cost"  # decided on stage 2 right minus the budget arm right, per image
CURVE_PREFIX = "curve/"  # a pipeline's per-epoch eval accuracy of every stage, on one epoch axis


@dataclass
class Job:
    number: int
    run_id: str
    name: str
    status: str
    values: dict = field(default_factory=dict)  # swept key -> value (as the override gave it)
    metrics: dict = field(default_factory=dict)
    failure: str = ""
    pipeline: bool = False
    seed: str = ""  # the seed it ran with (a point's jobs differ only there)
    selection: str = (
        "val"  # the split its choices read (tag sporeflow.selection; val_split=0: test)
    )
    # its run's per-image outcomes as read once (job_outcomes): (stage, file) -> right/wrong
    outcomes: dict | None = field(default=None, repr=False, compare=False)


def swept_values(overrides: str, params: dict, keys: list[str]) -> dict:
    """Each swept key's value in one job: its override (groups included), else its param."""
    given = {}
    for item in overrides.split():
        key, _, value = item.lstrip("+~").partition("=")
        given[key] = value
    return {k: given.get(k, params.get(k, "")) for k in keys}


def sweep_jobs(reads: StoreReads, sweep_run_id: str, keys: list[str]) -> list[Job]:
    runs = reads.search_runs(f"tags.`{SWEEP_RUN_ID_TAG}` = '{sweep_run_id}'", max_results=5000)
    jobs = []
    for run in runs:
        tags = run.data.tags
        jobs.append(
            Job(
                int(tags.get(SWEEP_JOB_TAG, -1)),
                run.info.run_id,
                tags.get("mlflow.runName", ""),
                "PRUNED" if tags.get(PRUNED_TAG) else run.info.status,  # ended KILLED
                swept_values(tags.get(OVERRIDES_TAG, ""), run.data.params, keys),
                dict(run.data.metrics),
                tags.get(FAILURE_TAG, ""),
                tags.get(STAGE_TAG) == "pipeline",
                run.data.params.get("seed", ""),
                tags.get(SELECTION_TAG, "val"),
            )
        )
    return sorted(jobs, key=lambda j: j.number)


SWEEP_NAME_FORMAT = "sweep-%Y-%m-%d-%H-%M-%S"  # a sweep parent's run name (time.strftime)
SWEEP_NAME = re.compile(r"sweep-\d{4}(-\d{2}){5}")  # a name SWEEP_NAME_FORMAT makes


def sweep_run(reads: StoreReads, which: str) -> Any | None:
    """The sweep parent run `which` names (its MLflow run id; its run name
    `sweep-<date>-<time>`, the newest of that name; its sweep dir, the newest sweep run there:
    a sweep whose id the console could not give, its writer gone; or `latest`: the newest sweep
    of the experiment); None when there is no such sweep."""
    if Path(which).is_dir():
        where = str(Path(which).resolve())
        quote = '"' if "'" in where else "'"  # MLflow's filter takes either
        found = reads.search_runs(
            f"tags.{STAGE_TAG} = 'sweep' and tags.`sweep.dir` = {quote}{where}{quote}",
            max_results=1,
        )
        return found[0] if found else None
    if which == "latest" or SWEEP_NAME.fullmatch(which):
        named = "" if which == "latest" else f" and attributes.run_name = '{which}'"
        found = reads.search_runs(f"tags.{STAGE_TAG} = 'sweep'{named}", max_results=1)
        return found[0] if found else None
    run = reads.get_run(which)
    return run if run is not None and run.data.tags.get(STAGE_TAG) == "sweep" else None


@dataclass
class SweepSummary:
    """A finished (or running) sweep, decided once (`decided`): what its end prints and
    records and what `sporeflow compare --sweep` and `sporeflow.results` show. Its jobs, the
    leader's first then by the objective; the decision between its points (None: no per-image
    outcomes); a sweep of `[<accuracy>, <cost>]` (its parent's `sweep.cost` tag) also its Pareto
    front (report.front); the leader (report.decision.lead: None without a decision) and its
    answer on the test images."""

    run: Any
    keys: list[str]
    key: str
    jobs: list[Job]
    decision: Decision | None
    cost: str = ""  # the parent's `sweep.cost`: "" for a sweep of one objective
    front: pareto.Front | None = None  # None: one objective, or no point with both numbers
    leader: Leader | None = None  # None: no decision (a loss objective, no outcomes)
    answer: str = ""  # the leader's one-line answer on the test images ("": not a pipeline)

    @property
    def leading_job(self) -> Job | None:
        """The job that speaks for the leader (its model is registered, its curves drawn): of
        the leader's seeds, the best-ranked; None without a leader. Without a decision (a loss
        objective) the best-ranked job, ranked, not decided."""
        if self.leader is None:
            return self.jobs[0] if self.jobs and self.key in self.jobs[0].metrics else None
        if self.leader.point is None:
            return None
        numbers = set(self.leader.point.jobs.values())
        return next(j for j in self.jobs if j.number in numbers)

    def ranks(self) -> dict[str, int]:
        """Each job's run id -> its place (1 first) as the saved view sorts: the leader's jobs
        1; with no leader, every job of the points the validation cannot tell apart 1 (the view
        does not pick one of them either); the rest after, by the objective."""
        first: set[int] = set()
        if self.leader is not None and self.decision is not None:
            chosen = [self.leader.point] if self.leader.point else self.decision.undecided
            first = {n for p in chosen for n in p.jobs.values()}
        found, place = {}, 1 + (1 if first else 0)
        for job in self.jobs:
            if job.number in first:
                found[job.run_id] = 1
            elif self.key in job.metrics:
                found[job.run_id], place = place, place + 1
        return found

    def front_leader(self) -> str:
        """The front's closing line: which of its points leads (the one rule, decision.lead)."""
        if self.leader is None:
            return ""
        return f"front's {self.leader.line()}"

    def front_records(self) -> list[dict]:
        """One dict per point of the front's table, cheapest first: point, acc, ci_low, ci_high,
        cost, on_front, beaten_by, how, p_holm (NaN on the front), seeds, jobs."""
        if self.front is None:
            return []
        return [
            {
                "point": r["point"],
                "acc": r["value"],
                "ci_low": r["ci_low"],
                "ci_high": r["ci_high"],
                "cost": r["cost"],
                "on_front": r["front"],
                "beaten_by": r["beaten_by"],
                "how": r["how"],
                "p_holm": r["p_holm"],
                "seeds": r["seeds"],
                "jobs": r["jobs"],
            }
            for r in self.front.records()
        ]


def summarize(reads: StoreReads, run: Any) -> SweepSummary:
    """A sweep's summary from its parent run's tags (`sporeflow compare --sweep`, `results`)."""
    tags = run.data.tags
    keys = [k for k in tags.get(SWEEP_KEYS_TAG, "").split(",") if k]
    objective_tag = tags.get(SWEEP_OBJECTIVE_TAG, "auto")
    return decided(reads, run.info.run_id, keys, objective_tag, tags.get(SWEEP_COST_TAG, ""), run)


def cost_measure(jobs: list[Job], cost: str) -> str:
    """What a tie is broken by: the sweep's own cost (`sweep.objective`'s second), else what a
    job records as its cost (a plain job's `cost/passes`, a pipeline's `stage2/passes`)."""
    return cost or objective.COSTS[any(j.pipeline for j in jobs)][0]


def decided(
    reads: StoreReads, run_id: str, keys: list[str], configured: str, cost: str, run: Any = None
) -> SweepSummary:
    """The one place a sweep is decided: its jobs ranked, its points, the decision, the front
    and the leader (report.decision.lead) with its answer; the sweep's end and every reader
    of the store call this, so they name the same leader for the same reason."""
    jobs = sweep_jobs(reads, run_id, keys)
    key = objective_key(jobs, configured)
    best_first = ranked(jobs, key)
    points = sweep_points(reads, best_first, keys, key)
    found = pareto.front(points, point_costs(best_first, points, cost), cost) if cost else None
    decision = decide(points)
    leader = None
    if decision is not None:
        measure = cost_measure(jobs, cost)
        on_front = {p.label for p in found.front} if found is not None else None
        leader = lead(decision, point_costs(best_first, points, measure), measure, on_front)
        if leader.point is not None:
            numbers = set(leader.point.jobs.values())
            best_first = [j for j in best_first if j.number in numbers] + [
                j for j in best_first if j.number not in numbers
            ]
    summary = SweepSummary(run, keys, key, best_first, decision, cost, found, leader)
    summary.answer = leader_answer(reads, summary)
    return summary


def leader_answer(reads: StoreReads, summary: SweepSummary) -> str:
    """The leader's one-line answer (report.paired.answer_line) on the test images: its stage
    2 against stage 1, each baseline and the budget arm, every seed's images pooled (the
    stratified exact test and interval of report.decision; one seed: McNemar's and Newcombe's,
    as a pipeline's own line). "" for a sweep of plain jobs or without outcomes; with no
    leader, a line that says so."""
    leader = summary.leader
    if leader is None:
        return ""
    if leader.point is None:
        return "answer: none (no leader); each job's comparison.txt answers for its point"
    by_number = {j.number: j for j in summary.jobs}
    arms: dict[str, dict[int, np.ndarray]] = {}
    for seed, number in leader.point.jobs.items():
        job = by_number[number]
        if not job.pipeline or job_outcomes(reads, job, StageKind.stage2, TEST_PREDICTIONS) is None:
            return ""
        for (stage, file), outcomes in (job.outcomes or {}).items():
            if file == TEST_PREDICTIONS:
                arms.setdefault(stage, {})[seed] = outcomes
    stage2 = arms.get(StageKind.stage2, {})
    compared = []
    for arm in arm_order(arms):
        pooled = stratified(stage2, arms[arm])
        if pooled.strata:
            low, high = pooled.ci95
            compared.append(Versus(arm, pooled.diff, low, high, pooled.p_value, pooled.images))
    seeds = len(stage2)
    counted = f"{seeds} seeds pooled" if seeds > 1 else "1 seed"
    where = f"{leader.point.label}, test images, {counted}"
    return answer_line(compared, where, BUDGET)


def objective_key(jobs: list[Job], configured: str) -> str:
    return objective.metric_key(configured, any(j.pipeline for j in jobs))


def ranked(jobs: list[Job], key: str) -> list[Job]:
    """Best first by `key`; jobs without it (failed, still running) last, in job order."""
    sign = -1.0 if objective.maximize(key) else 1.0
    scored = sorted((j for j in jobs if key in j.metrics), key=lambda j: sign * j.metrics[key])
    return scored + [j for j in jobs if key not in j.metrics]


def point_label(job: Job, keys: list[str]) -> str:
    """A job's point: its swept settings but the seed ("(defaults)" when the seed is all)."""
    return " ".join(f"{k}={short_value(job.values.get(k, ''))}" for k in keys if k != "seed") or (
        "(defaults)"
    )


def decided_stage(key: str, pipeline: bool) -> str | None:
    """Whose per-image outcomes decide an objective (`key`: its metric, config.objective):
    `val/<stage>/acc` that stage's, `val/gain` stage 2's (a point's baselines are its seed's,
    shared by every point), `final/val/acc` the plain run's; None for a loss (no per-image
    outcome to pair). `val/gain_at_cost`: stage 2's, less its own budget arm's (every point
    has its own budget arm)."""
    if key.endswith("loss"):
        return None
    if not pipeline:
        return "final"
    named = key.removeprefix("val/")
    return StageKind.stage2 if named in ("gain", AT_COST) else named.partition("/")[0]


def job_outcomes(
    reads: StoreReads, job: Job, stage: str, file: str = PREDICTIONS
) -> np.ndarray | None:
    """Right/wrong per image of the job's `stage`, from its run's artifacts (a pipeline keeps
    every stage's under predictions/<stage>/): `file` predictions.npy the validation images
    (what decides), test_predictions.npy the test images (what reports); None when the store
    has none. The run's files are downloaded once (`Job.outcomes`): a summary reads a job's
    validation outcomes to decide and its test outcomes to report, a budget arm's beside."""
    if job.outcomes is None:
        job.outcomes = _downloaded_outcomes(reads, job)
    return job.outcomes.get((stage if job.pipeline else "", file))


def _downloaded_outcomes(reads: StoreReads, job: Job) -> dict:
    """Every predictions file of the job's run: (stage, file name) -> array; a plain job's
    under stage ""."""
    wanted = ["predictions"] if job.pipeline else [PREDICTIONS, TEST_PREDICTIONS]
    with tempfile.TemporaryDirectory() as tmp:
        if not reads.download(job.run_id, wanted, Path(tmp)):
            return {}
        folders = sorted(Path(tmp, "predictions").iterdir()) if job.pipeline else [Path(tmp)]
        return {
            (folder.name if job.pipeline else "", name): np.load(folder / name, allow_pickle=False)
            for folder in folders
            for name in (PREDICTIONS, TEST_PREDICTIONS)
            if (folder / name).is_file()
        }


def scored(reads: StoreReads, job: Job, key: str, file: str) -> np.ndarray | None:
    """The per-image outcomes `key` is decided on for one job (`file`: which split's)."""
    stage = decided_stage(key, job.pipeline)
    found = None if stage is None else job_outcomes(reads, job, stage, file)
    if found is not None and key.endswith(AT_COST):
        budget = job_outcomes(reads, job, StageKind.budget, file)
        found = None if budget is None else found.astype(np.int8) - budget.astype(np.int8)
    return found


def seed_of(job: Job) -> int:
    return int(job.seed) if job.seed.lstrip("-").isdigit() else job.number


def sweep_decision(
    reads: StoreReads, jobs: list[Job], keys: list[str], key: str
) -> Decision | None:
    """The decision between the sweep's points (its finished jobs grouped by their settings but
    the seed), on their validation images; None when the objective has no per-image outcomes."""
    return decide(sweep_points(reads, jobs, keys, key))


def point_costs(jobs: list[Job], points: list[Point], cost: str) -> dict[str, float]:
    """Each point's cost (`cost`: a metric of its jobs' top-level runs, config.objective): the
    mean over its seeds' jobs that recorded it; a point none of whose jobs did is left out."""
    by_number = {j.number: j for j in jobs}
    found = {}
    for point in points:
        spent = [
            by_number[n].metrics[cost]
            for n in point.jobs.values()
            if n in by_number and cost in by_number[n].metrics
        ]
        if spent:
            found[point.label] = float(np.mean(spent))
    return found


def sweep_points(reads: StoreReads, jobs: list[Job], keys: list[str], key: str) -> list[Point]:
    """The sweep's points (its finished jobs grouped by their settings but the seed) with their
    per-image outcomes on the validation images; none when the objective has none."""
    points: dict[str, Point] = {}
    for job in jobs:
        if job.status != "FINISHED" or key not in job.metrics:
            continue
        found = scored(reads, job, key, PREDICTIONS)
        if found is None:
            continue
        point = points.setdefault(point_label(job, keys), Point(point_label(job, keys)))
        point.jobs[seed_of(job)], point.outcomes[seed_of(job)] = job.number, found
    return list(points.values())


def reported(reads: StoreReads, jobs: list[Job], point: Point, key: str) -> Point | None:
    """The chosen point's outcomes on the test images (its jobs' test_predictions.npy): the
    estimate nothing chose. None when a job has none (recorded before the validation split)."""
    by_number = {j.number: j for j in jobs}
    tested = Point(point.label)
    for seed, number in point.jobs.items():
        found = scored(reads, by_number[number], key, TEST_PREDICTIONS)
        if found is None:
            return None
        tested.jobs[seed], tested.outcomes[seed] = number, found
    return tested


def selected_on_test(jobs: list[Job]) -> bool:
    """Whether the sweep's jobs chose on the test split (dataset.val_split=0: tagged so)."""
    return any(j.selection == "test" for j in jobs)


def reported_line(point: Point, tested: Point, on_test: bool) -> str:
    """The chosen point on the test images: the estimate nothing chose and how much validation
    flattered it; on test-chosen points (dataset.val_split=0) a warning instead."""
    low, high = tested.ci95
    images = sum(o.size for o in tested.outcomes.values())
    said = (
        f"reported: {point.label} on the test images {tested.accuracy:.4f} (95% CI "
        f"{low:.4f}..{high:.4f}, {images} images)"
    )
    if on_test:
        return (
            f"{said}; optimistic: dataset.val_split=0, so the test images chose it too "
            "(the winner's curse: set dataset.val_split for an estimate nothing chose)"
        )
    optimism = point.accuracy - tested.accuracy
    return f"{said}: the estimate nothing chose; optimism (validation minus test) {optimism:+.4f}"


def table_rows(jobs: list[Job], keys: list[str]) -> tuple[list[str], list[list[str]]]:
    """(header, rows) as strings: job, status, each swept key, each stage's accuracy, gain and
    its 95% interval and McNemar p when the jobs are pipelines."""
    metrics = [(k, h) for k, h in METRIC_COLUMNS if any(k in j.metrics for j in jobs)]
    low, high, p = GAIN_CI
    paired = any(low in j.metrics for j in jobs)
    header = ["job", "status", *keys, *(h for _, h in metrics)] + (
        ["test gain 95% CI", "p"] if paired else []
    )
    rows = []
    for job in jobs:
        m = job.metrics
        row = [str(job.number), job.status, *(short_value(job.values.get(k, "")) for k in keys)]
        row += [
            (format(m[k], "+.4f" if "gain" in k else ".4f") if k in m else "-") for k, _ in metrics
        ]
        if paired:
            row.append(f"{m[low]:+.4f}..{m[high]:+.4f}" if low in m else "-")
            row.append(format(m[p], ".3g") if p in m else "-")
        rows.append(row)
    return header, rows


def render(header: list[str], rows: list[list[str]], fmt: str = "text") -> str:
    """text (aligned columns), csv, or markdown (a table for papers and notes)."""
    if fmt == "csv":
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows([header, *rows])
        return out.getvalue()
    if fmt == "markdown":
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    return (
        "\n".join(
            "  ".join(str(c).rjust(w) for c, w in zip(line, widths, strict=False))
            for line in [header, *rows]
        )
        + "\n"
    )


def _axis(values: list[str]) -> tuple[list, bool]:
    try:
        return [float(v) for v in values], True
    except ValueError:
        return values, False


def gain_plot(jobs: list[Job], keys: list[str], key: str, path: Path) -> Path | None:
    """One panel per swept key: each finished job's gain (or objective) against that key's
    value, with the gain's 95% interval; a dashed line at zero gain. The gain shown is the
    test images' (what reports), its best baseline chosen on validation."""
    low, high, _ = GAIN_CI
    done = [j for j in jobs if key in j.metrics or GAIN in j.metrics]
    if not done or not keys:
        return None
    y_key = GAIN if any(GAIN in j.metrics for j in done) else key
    done = [j for j in done if y_key in j.metrics]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, axes = plt.subplots(
            1, len(keys), figsize=(3.6 * len(keys) + 0.6, 3.4), squeeze=False, sharey=True
        )
        for ax, swept in zip(axes[0], keys, strict=False):
            xs, numeric = _axis([j.values.get(swept, "") for j in done])
            ys = [j.metrics[y_key] for j in done]
            if y_key == GAIN and all(low in j.metrics for j in done):
                err = [
                    [y - j.metrics[low] for y, j in zip(ys, done, strict=False)],
                    [j.metrics[high] - y for y, j in zip(ys, done, strict=False)],
                ]
                ax.errorbar(xs, ys, yerr=err, fmt="o", capsize=3, color="#2a7")
            else:
                ax.plot(xs, ys, "o", color="#2a7")
            if y_key == GAIN:
                ax.axhline(0.0, color="#888", linestyle="--", linewidth=1)
            ax.set_xlabel(swept + ("" if numeric else " (category)"))
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel(
            "test gain: stage2 - best baseline (acc, 95% CI)" if y_key == GAIN else y_key
        )
        fig.suptitle(f"{len(done)} jobs: {y_key} against each swept parameter", fontsize=10)
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished sweep
        log.warning("gain plot failed: %s", ex)
        return None


# the curves' stages in the legend's order, each with its colour and dash
CURVE_STYLES = {
    StageKind.stage1: ("#888", "-"),
    StageKind.stage2: ("#2a7", "-"),
    StageKind.baseline: ("#57c", "--"),
    StageKind.annealed: ("#c84", "--"),
    StageKind.snapshot_mean: ("#a5a", ":"),
}


def _curve_line(stage: str, points: list, start: list, last: float) -> list:
    """What a stage's curve draws: stage 1 as it is; a stage without training (the snapshot
    mean, one point) as a level to the last epoch; the others from stage 1's last point."""
    if stage == StageKind.stage1:
        return points
    if len(points) == 1:
        return [(points[0][0], points[0][1]), (last, points[0][1])]
    return start + points


def curves_plot(reads: StoreReads, job: Job, path: Path) -> Path | None:
    """The best job's per-epoch validation accuracy: stage 1, then stage 2 and each baseline from
    where stage 1 ended (the `curve/<stage>` metrics of its pipeline run)."""
    order = list(CURVE_STYLES)
    stages = sorted(
        (k[len(CURVE_PREFIX) :] for k in job.metrics if k.startswith(CURVE_PREFIX)),
        key=lambda s: (order.index(s) if s in order else len(order), s),
    )
    curves = {s: reads.metric_history(job.run_id, CURVE_PREFIX + s) for s in stages}
    curves = {s: c for s, c in curves.items() if c}
    if not curves:
        return None
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6.4, 3.6))
        # later stages start from stage 1's last point
        start = curves.get(StageKind.stage1, [])[-1:]
        last = max(p[0] for points in curves.values() for p in points)
        for stage, points in curves.items():
            line = _curve_line(stage, points, start, last)
            colour, dash = CURVE_STYLES.get(stage, (None, "-"))
            ax.plot(
                [p[0] for p in line],
                [p[1] for p in line],
                marker="o",
                markersize=3,
                linestyle=dash,
                color=colour,
                label=f"{stage} {points[-1][1]:.4f}",
            )
        ax.set_xlabel("epoch (stage 2 and baselines continue from stage 1)")
        ax.set_ylabel("validation accuracy")
        ax.set_title(f"best job {job.number}: {job.name}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
        return save_figure(fig, path)
    except Exception as ex:  # noqa: BLE001 - a plot must not fail a finished sweep
        log.warning("curves plot failed: %s", ex)
        return None


def ui_links(
    base: str, experiment_id: str, sweep, jobs: list, artifacts: set[str] | None = None
) -> list[tuple[str, str]]:
    """Deep links into MLflow 3's UI, in its ML view (workflowType). A sweep that saved its
    view (report.views, tag `sweep.view`) opens with it: its jobs, sorted by the objective,
    the deciding columns, as a table (`sweep`) or as its charts (`charts`); an older sweep's
    link filters and sorts only. The compare page lists every param and metric of the jobs. A
    sweep of accuracy and cost that decided its front (tag `sporeflow.front`) links `front`:
    the parent's front.png in MLflow's artifact view (its own route for a run's artifact,
    `runs/<id>/artifacts/<path>`), front.csv beside it in the same tree; to front.csv when
    `artifacts` (the parent's, when known) lacks the figure (its drawing failed), and no link
    when it holds neither."""
    import json
    from urllib.parse import urlencode

    runs = f"{base}/#/experiments/{experiment_id}/runs"
    links = [("experiment", f"{runs}?{urlencode({'workflowType': 'machine_learning'})}")]
    if sweep is None:
        return links
    tags = sweep.data.tags
    key = objective.metric_key(
        tags.get(SWEEP_OBJECTIVE_TAG, "auto"),
        any(j.data.tags.get(STAGE_TAG) == "pipeline" for j in jobs),
    )
    query = {
        "workflowType": "machine_learning",
        "searchFilter": f"tags.`{SWEEP_RUN_ID_TAG}` = '{sweep.info.run_id}'",
        "orderByKey": f"metrics.`{key}`",
        "orderByAsc": "false" if objective.maximize(key) else "true",
    }
    view = tags.get(SWEEP_VIEW_TAG)
    if view:  # the sweep's saved view (report.views): its columns, sort and charts
        shared = {"viewStateShareKey": view, "workflowType": "machine_learning"}
        links.append(("sweep", f"{runs}?{urlencode(shared)}"))
        links.append(("charts", f"{runs}?{urlencode({**shared, 'compareRunsMode': 'CHART'})}"))
    else:  # a sweep from before saved views: filter and sort only
        links.append(("sweep", f"{runs}?{urlencode(query)}"))
    best = tags.get(SWEEP_BEST_RUN_TAG)
    if best:
        links.append(("best job", f"{runs}/{best}"))
    shown = [f for f in (pareto.FIGURE, pareto.TABLE) if artifacts is None or f in artifacts]
    if tags.get(FRONT_TAG) and shown:  # report.front's figure, accuracy against cost
        links.append(("front", f"{runs}/{sweep.info.run_id}/artifacts/{shown[0]}"))
    if jobs:
        ids = [j.info.run_id for j in jobs]
        links.append(
            (
                "compare",
                f"{base}/#/compare-runs?"
                + urlencode(
                    {
                        "runs": json.dumps(ids),
                        "experiments": json.dumps([experiment_id]),
                        "workflowType": "machine_learning",
                    }
                ),
            )
        )  # else the compare page may switch to the GenAI view
    return links
