"""What a sweep ranks its jobs by (`sweep.objective`): each choice names a metric of the job's
run and a direction; the ranking puts the best job first and jobs without the metric last."""

from __future__ import annotations

import pytest

from sporeflow.config import objective
from sporeflow.report.sweep_report import Job, objective_key, ranked


def job(number: int, pipeline: bool, **metrics: float) -> Job:
    return Job(
        number, f"run{number}", f"job {number}", "FINISHED", metrics=metrics, pipeline=pipeline
    )


PIPELINES = [
    job(0, True, **{"val/stage2/acc": 0.90, "val/gain": -0.01, "val/stage1/loss": 0.30}),
    job(1, True, **{"val/stage2/acc": 0.85, "val/gain": 0.02, "val/stage1/loss": 0.20}),
    job(2, True, **{"val/stage2/acc": 0.95, "val/gain": 0.00, "val/stage1/loss": 0.40}),
    Job(3, "run3", "job 3", "FAILED", pipeline=True),
]
PLAIN = [
    job(0, False, **{"final/val/acc": 0.5, "final/val/loss": 0.9}),
    job(1, False, **{"final/val/acc": 0.4, "final/val/loss": 0.7}),
]


@pytest.mark.parametrize(
    "jobs, configured, key, order",
    [
        (PIPELINES, "auto", "val/stage2/acc", [2, 0, 1, 3]),
        (PIPELINES, "gain", "val/gain", [1, 2, 0, 3]),
        (
            PIPELINES,
            "val/stage1/loss",
            "val/stage1/loss",
            [1, 0, 2, 3],
        ),  # a loss: the smallest first
        (PLAIN, "auto", "final/val/acc", [0, 1]),
        (PLAIN, "loss", "final/val/loss", [1, 0]),
    ],
)
def test_jobs_are_ranked_by_the_objective(jobs, configured, key, order):
    assert objective_key(jobs, configured) == key
    assert [j.number for j in ranked(jobs, key)] == order


def test_every_allowed_objective_names_a_metric_and_a_direction():
    for dim_reduce in (False, True):
        for choice in objective.allowed(dim_reduce, ["baseline", "annealed"]):
            key = objective.metric_key(choice, dim_reduce)
            assert objective.maximize(key) == (not key.endswith("loss")), key
            # a plain run reports final/<metric>; a pipeline's parent run its stages' metrics
            assert key.startswith("final/") == (not dim_reduce), key
