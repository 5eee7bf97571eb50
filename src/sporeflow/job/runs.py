"""The MLflow side of stages: run names, what every run records, how a run ends, and what the
launcher needs done to the store around a parallel job. Imports no MindSpore, so the launcher
process (which trains nothing) stays light."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from omegaconf import DictConfig, OmegaConf

from sporeflow.config.facts import container
from sporeflow.config.schema import RunConfig, TrackingConfig
from sporeflow.core.context import RunContext
from sporeflow.core.errors import TrialPruned
from sporeflow.core.names import (
    FAILURE_TAG,
    OVERRIDES_TAG,
    PRUNED_TAG,
    REQUEUES_TAG,
    RUN_DIR_TAG,
    STAGE_TAG,
    SWEEP_JOB_TAG,
    SWEEP_RUN_ID_TAG,
    StageKind,
)
from sporeflow.core.signals import Requeued
from sporeflow.storage.run_marker import read_run_marker
from sporeflow.tracking.store import (
    MAX_EXPERIMENT_NAME_LENGTH,
    MAX_KEY_LENGTH,
    MAX_PARAM_LENGTH,
    MAX_RUN_NAME_LENGTH,
    MAX_TAG_LENGTH,
    StoreError,
    shown,
    too_long,
)
from sporeflow.tracking.sync import sync, wait_for_writers
from sporeflow.tracking.tracker import TrackedRun, Tracker, flatten

if TYPE_CHECKING:
    from sporeflow.job.plan import JobPlan

T = TypeVar("T")
log = logging.getLogger(__name__)


def base_name(run: RunConfig | DictConfig) -> str:
    """ "<model>-<dataset>" from the components' class names: lenet5-digits. Of the typed
    config (a job's `plan.run`), or of a config as composed (a sweep's, eval.py's source's)."""
    model = str(run.model["_target_"]).rsplit(".", 1)[-1].lower()
    data = str(run.dataset["_target_"]).rsplit(".", 1)[-1].lower()
    return f"{model}-{data}"


def run_name(run: RunConfig, ctx: RunContext | None = None) -> str:
    """`tracking.run_name`, else "<model>-<dataset>", "-dim_reduce" added for a pipeline; in a
    sweep, what differs between its jobs: "dim_reduce rho=0.4 sigma=0.2"."""
    dim_reduce = run.dim_reduce
    base = run.tracking.run_name or base_name(run)
    if ctx is not None and ctx.sweep is not None:
        base = "dim_reduce" if dim_reduce and not run.tracking.run_name else base
        return f"{base} {ctx.sweep.label(ctx.overrides)}".strip()
    return f"{base}-dim_reduce" if dim_reduce else base


def start_job_run(tracker: Tracker, plan: JobPlan, stage: str) -> TrackedRun:
    """The top-level run of one job (a plain training run or a pipeline), config recorded; in a
    sweep, a child of the sweep's parent run, tagged with the job's number."""
    ctx, tags, parent = plan.ctx, {STAGE_TAG: stage}, None
    if ctx.sweep is not None:
        parent = tracker.run(ctx.sweep.run_id)  # an MLflow id, or the sweep journal's key
        tags.update({SWEEP_RUN_ID_TAG: ctx.sweep.run_id, SWEEP_JOB_TAG: str(ctx.sweep.job)})
    interval = plan.run.tracking.system_metrics_interval if stage != "pipeline" else 0.0
    name = run_name(plan.run, ctx)
    run = tracker.start_run(name, tags=tags, parent=parent, system_metrics=interval)
    record_config(run, plan.cfg, ctx, stage)
    return run


def record_config(
    run: TrackedRun, cfg: DictConfig, ctx: RunContext, stage: str, changed: dict | None = None
) -> None:
    """Params (the config flattened; `changed` holds the flat keys where this stage differs
    from the config, e.g. stage 2's epochs), tags, and the composed YAML + Hydra files as
    artifacts."""
    plain = container(cfg)
    run.log_params({**flatten(plain), **(changed or {})})
    run.set_tags(config_tags(plain.get("experiment"), ctx, stage))
    run.log_text(OmegaConf.to_yaml(plain), "config/config.yaml")
    run.log_text("\n".join(ctx.overrides) + "\n", "config/overrides.txt")
    if ctx.hydra_dir is not None:  # as text: log_text takes URI passwords out
        for path in sorted(ctx.hydra_dir.glob("*.yaml")):
            run.log_text(path.read_text(), f"config/hydra/{path.name}")


def config_tags(experiment: str | None, ctx: RunContext, stage: str) -> dict[str, str]:
    """The tags every run of the job gets from its config (`experiment`: the preset it names)
    and command line."""
    return {
        STAGE_TAG: stage,
        "experiment": experiment or "",
        "git_commit": ctx.git_commit or "",
        "git_dirty": "" if ctx.git_dirty is None else str(ctx.git_dirty).lower(),
        OVERRIDES_TAG: " ".join(ctx.overrides),
        RUN_DIR_TAG: str(ctx.run_dir),
        "onednn_max_cpu_isa": os.environ.get("ONEDNN_MAX_CPU_ISA", ""),
    }


def record_problems(plan: JobPlan) -> list[str]:
    """What MLflow would refuse (or cut) of what the job records - its experiment's and run's
    names, the config's params, the tags - one line per key, so that it is said before work
    and not by the writer after training (MLflow's limits: tracking.store)."""
    ctx, run = plan.ctx, plan.run
    name, tracking = run_name(run, ctx), run.tracking
    name_key = f"tracking.run_name={shown(name)}" if tracking.run_name else f"the run name {name!r}"
    checks = [
        (
            f"tracking.experiment_name={shown(tracking.experiment_name)}",
            tracking.experiment_name,
            MAX_EXPERIMENT_NAME_LENGTH,
            " in an experiment's name: choose a shorter one",
        ),
        (
            name_key,
            name,
            MAX_RUN_NAME_LENGTH,
            " in a run's name: choose a shorter tracking.run_name",
        ),
    ]
    for kind, values, limit in (
        ("param", flatten(container(plan.cfg), limit=None), MAX_PARAM_LENGTH),
        ("tag", config_tags(run.experiment, ctx, StageKind.train), MAX_TAG_LENGTH),
    ):
        for key, value in values.items():
            checks.append((f"{kind} {shown(key)}", key, MAX_KEY_LENGTH, f" in a {kind}'s key"))
            label = key if kind == "param" else f"tag {key}"
            checks.append((f"{label}={shown(value)}", value, limit, f" of a {kind}'s value"))
    return [
        f"{key}: {problem}{what}"
        for key, value, limit, what in checks
        if (problem := too_long(value, limit))
    ]


def guarded(run: TrackedRun, fn: Callable[[], T]) -> T:
    """Run fn(); the MLflow run ends FINISHED, or KILLED (Ctrl-C; a pruned trial, the pruner's
    reason in `sporeflow.pruned`) / FAILED if fn raises, the reason in `sporeflow.failure`. A
    job stopped for a requeue leaves it RUNNING (`sporeflow.requeues` counts them): the
    requeued job continues it."""
    try:
        result = fn()
    except Requeued as ex:
        run.set_tags({REQUEUES_TAG: ex.requeues})
        raise
    except KeyboardInterrupt:
        run.end("KILLED")
        raise
    except TrialPruned as ex:  # stopped by the sweep's pruner: not a failure
        run.set_tags({PRUNED_TAG: str(ex)})
        run.end("KILLED")
        raise
    except BaseException as ex:
        run.set_tags({FAILURE_TAG: f"{type(ex).__name__}: {ex}"[:5000]})
        run.end("FAILED")
        raise
    run.end("FINISHED")
    return result


def prepare_store(tracking: TrackingConfig, ctx: RunContext) -> None:
    """Create the MLflow store and experiment before workers start, so a worker killed mid-way
    can never leave a half-migrated database behind (and rank 0 does not pay the migration).
    A store that cannot be reached now is left to the journal's writer to retry."""
    store = Tracker.from_config(tracking, ctx.launch_dir).reads.store()
    try:
        store.connect()
    except StoreError as ex:
        log.warning(
            "MLflow store not reachable before the workers start (%s): records wait in the journal",
            ex,
        )


def mark_ended(tracking: TrackingConfig, ctx: RunContext, status: str) -> None:
    """A parallel job's run must not stay RUNNING when the job failed or was stopped: rank 0
    wrote its run (an MLflow id or its journal key) into the run marker. Rank 0's writer is let
    finish first (it ends what its dead trainer left open KILLED), a journal whose writer died
    is applied here, then FAILED always applies (the job failed whatever rank 0 saw); KILLED
    only to a run rank 0 could not end itself."""
    run_ref = read_run_marker(ctx.run_dir).get("mlflow_run_id")
    if not run_ref or not tracking.enabled:
        return
    tracker = Tracker.from_config(tracking, ctx.launch_dir, journal_dir=ctx.run_dir)
    wait_for_writers(ctx.run_dir, tracker.drain_timeout)
    sync(ctx.run_dir)
    with tracker:
        found = tracker.reads.get_run(run_ref)
        if status == "FAILED" or (found is not None and found.info.status == "RUNNING"):
            tracker.resume_run(found.info.run_id if found is not None else run_ref).end(status)
