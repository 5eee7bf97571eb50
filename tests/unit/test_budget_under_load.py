"""The budget arm's steps do not depend on the machine's load (issue 63, item 6): two identical
dim-reduce jobs in this process, the second beside a process spinning on a CPU, give the budget
arm the same steps - stage 1's snapshots and the PCA count by engine.cost's rule, not by their
seconds - and stage 2's run's cost/passes is the budget on both."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers.inprocess import TINY_PIPELINE, run_job
from helpers.store import by_stage, runs_of
from sporeflow.entry.python_api import compose

JOB = [*TINY_PIPELINE, "boost.baselines=[budget]"]  # only the arm this is about


def compose_job(overrides):
    return compose(overrides, validate=False)


def budget_of_job(launch):
    stages = by_stage(runs_of(launch))
    ((parent,), (stage2,), (budget,)) = (stages[s] for s in ("pipeline", "stage2", "budget"))
    return parent.data.metrics, stage2.data.metrics, budget.data.tags, budget.data.metrics


def test_two_identical_jobs_give_the_budget_arm_the_same_steps_under_cpu_load(
    tmp_path, monkeypatch
):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    quiet, busy = tmp_path / "quiet", tmp_path / "busy"  # own stores: nothing is reused
    run_job(compose_job, quiet, JOB, run="a")
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        run_job(compose_job, busy, JOB, run="a")
    finally:
        spinner.kill()
        spinner.wait()
    jobs = [budget_of_job(launch) for launch in (quiet, busy)]
    (p1, s1, t1, b1), (p2, s2, t2, b2) = jobs
    assert t1["budget.steps"] == t2["budget.steps"]
    assert t1["budget.passes"] == t2["budget.passes"]
    assert t1["budget.overhead_passes"] == t2["budget.overhead_passes"]
    assert b1["cost/steps"] == b2["cost/steps"] == int(t1["budget.steps"])
    for parent, stage2, tags in ((p1, s1, t1), (p2, s2, t2)):
        # one quantity under one name: stage 2's cost/passes, the parent's stage2/passes, the
        # budget given
        assert parent["stage2/passes"] == pytest.approx(stage2["cost/passes"])
        assert float(tags["budget.passes"]) == pytest.approx(stage2["cost/passes"], abs=2e-3)
        assert parent["budget_given/passes"] == pytest.approx(stage2["cost/passes"], abs=2e-3)
