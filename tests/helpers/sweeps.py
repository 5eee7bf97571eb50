"""A sweep run in this process the way Hydra's basic launcher runs one: the sweep callback's
on_multirun_start, each job (on_job_start -> the job -> on_job_end), on_multirun_end."""

from __future__ import annotations

import os

from hydra.core.utils import JobReturn, JobStatus
from omegaconf import open_dict

from helpers.inprocess import TINY, context
from sporeflow.config.validation import validate
from sporeflow.core.context import SWEEP_RUN_ENV, SweepJob, TrialLink
from sporeflow.entry.python_api import compose
from sporeflow.entry.sweep_run import SweepRun


def composed(launch, overrides, task, job=None, sweep_dir="multirun"):
    """What Hydra hands the callback: the config with its hydra node, as in a multirun."""
    cfg = compose(overrides, validate=False, with_hydra=True)
    with open_dict(cfg):
        cfg.hydra.runtime.cwd = str(launch)
        cfg.hydra.sweep.dir = str(launch / sweep_dir)
        cfg.hydra.overrides.task = list(task)
        if job is not None:
            cfg.hydra.job.num = job
            cfg.hydra.runtime.output_dir = str(launch / sweep_dir / str(job))
    return cfg


def without_hydra(config):
    """The job's own config, as Hydra hands it to the task function."""
    job = config.copy()
    with open_dict(job):
        del job["hydra"]
    return job


def run_sweep(
    launch, jobs: list[list[str]], sweep_task: list[str], sweep_dir="multirun", base=TINY
):
    """on_multirun_start, then each job (`base` + its overrides: on_job_start -> the job in
    process -> on_job_end), then on_multirun_end; returns the callback, with the parent each
    job was handed (`handed`)."""
    from sporeflow.job.pipeline import run_pipeline
    from sporeflow.job.plan import plan_job

    callback = SweepRun()
    # Hydra's task overrides are the whole command line: the base is part of every point the
    # callback checks before the first job (entry.sweep_check)
    start = composed(launch, [*base, *jobs[0]], [*base, *sweep_task], sweep_dir=sweep_dir)
    callback.on_multirun_start(start)
    callback.handed = []
    for number, overrides in enumerate(jobs):
        config = composed(launch, [*base, *overrides], overrides, job=number, sweep_dir=sweep_dir)
        callback.on_job_start(config)
        ctx = context(launch, overrides, run=f"{sweep_dir}/{number}")
        ctx.sweep, ctx.trial = SweepJob.from_environ(), TrialLink.from_environ()
        callback.handed.append(ctx.sweep.run_id)
        try:
            value = run_pipeline(plan_job(validate(without_hydra(config)), ctx)).objective
            result = JobReturn(status=JobStatus.COMPLETED, _return_value=value)
        except Exception as ex:  # noqa: BLE001 - what Hydra's run_job catches
            result = JobReturn(status=JobStatus.FAILED, _return_value=ex)
        callback.on_job_end(config, result)
    callback.on_multirun_end(start)
    os.environ.pop(SWEEP_RUN_ENV, None)
    return callback
