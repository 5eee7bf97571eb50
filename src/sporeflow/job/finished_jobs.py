"""A sweep started again does not train what it finished before (`sweep.skip_finished`).

Every sweep job's top-level run carries its key (`sporeflow.job_key`): a digest of its whole config
but where it logs and how a sweep ranks (`tracking`, `sweep`, `resume`, the progress bar), and
of what else made it (stage.provenance: sporeflow's code, MindSpore, the data's digest). A
sweep job whose key a FINISHED run of the store already has is not trained: its run in this
sweep copies that run's metrics and per-image predictions (what the sweep's table and decision
read) and names it (`sporeflow.copied_from`). So an interrupted multi-seed grid, started again
with the same command, trains only the jobs it had not finished; a job with other code, data or
MindSpore trains again.

Jobs of several workers (msrun) are always trained: every rank would have to agree on the copy.
An Optuna study's trials are always trained too: the study continues by itself, and a trial is
a new proposal (its sampler may propose a finished point again: that is the sampler's to avoid).
The copied run logs no model of its own: the original's is the one to register or serve.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
from pathlib import Path

from sporeflow.config.facts import container
from sporeflow.core.names import COPIED_FROM_TAG, JOB_KEY_TAG, StageKind

log = logging.getLogger(__name__)

NOT_IN_KEY = ("tracking", "sweep", "resume")  # where a job logs and how a sweep ranks it
COPIED_DIR = "copied"  # in the job's run dir: the original's predictions, sent as this run's


def job_key(cfg, provenance: dict[str, str]) -> str:
    """What makes a job's results: its config (but NOT_IN_KEY and the progress bar) and its
    provenance, as 16 hex digits."""
    key = {k: v for k, v in container(cfg).items() if k not in NOT_IN_KEY}
    key.get("callbacks", {}).pop("progress_bar", None)
    blob = json.dumps({"config": key, "made_with": provenance}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def keyed(runner) -> bool:
    """Whether the job's run carries a key: a single-worker sweep job that records runs (the
    key digests the data files: single runs do not pay for it)."""
    return runner.ctx.sweep is not None and runner.tracker.enabled and runner.worker.world_size == 1


def applies(runner) -> bool:
    """Whether this job may be copied: a keyed job of a grid or a race (not an Optuna trial:
    core.context.SweepJob.copies) with `sweep.skip_finished` on."""
    plan = runner.plan
    skip = plan.run.sweep.skip_finished
    return skip and keyed(runner) and runner.ctx.sweep.copies and plan.resume is None


def finished_run(runner, key: str):
    """The newest FINISHED top-level run with `key`, an original before a copy; None."""
    found = runner.tracker.reads.finished_with_tag(JOB_KEY_TAG, key)
    originals = [r for r in found if COPIED_FROM_TAG not in r.data.tags]
    return (originals or found or [None])[0]


def copy_finished(runner) -> dict | None:
    """When this sweep job finished before (module docstring): its run here, copied from that
    one, and the metrics it reported; None when the job has to train."""
    if not applies(runner):
        return None
    original = finished_run(runner, runner.job_key())
    if original is None:
        return None
    stage = "pipeline" if runner.plan.dim_reduce else StageKind.train
    run = runner.open_job_run(stage, runner.ctx.run_dir)  # tagged with the key
    run.set_tags({COPIED_FROM_TAG: original.info.run_id})
    metrics = dict(original.data.metrics)
    run.log_metrics(metrics, 0)
    for path, folder in _predictions(runner, original.info.run_id):
        run.log_artifact(path, folder)
    run.end("FINISHED")
    print(
        f"[sporeflow] job {runner.ctx.sweep.job}: finished before as MLflow run "
        f"{original.info.run_id} (same settings, seed, code, MindSpore and data): copied, not "
        "trained (sweep.skip_finished=false trains it)",
        file=sys.stderr,
    )
    return metrics


def _predictions(runner, run_id: str) -> list[tuple[Path, str | None]]:
    """The original's per-image predictions, downloaded into this run dir: (file, the artifact
    folder it goes to)."""
    where = Path(runner.ctx.run_dir) / COPIED_DIR
    where.mkdir(parents=True, exist_ok=True)
    runner.tracker.reads.download(
        run_id, ["predictions", "predictions.npy", "test_predictions.npy"], where
    )
    return [
        (path, str(path.parent.relative_to(where)) if path.parent != where else None)
        for path in sorted(where.rglob("*.npy"))
    ]
