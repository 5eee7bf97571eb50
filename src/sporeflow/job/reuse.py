"""Reuse by fingerprint. Stage 1 and the baselines of a dim-reduce pipeline depend on less than
the whole config (not on rho, gamma, alpha, sigma or n_component), so a sweep over stage-2
settings trains stage 1 once and each baseline once: a finished run whose fingerprint tag
matches is reused. Concurrent jobs (joblib, submitit) take turns per fingerprint under a file
lock in the launch dir, so the second job waits for the first one's run instead of training
its own copy.

Across machines (a store other machines reach: an MLflow server or a database) a reused run's
files need not be on this disk: the run that trained them also leaves them as artifacts
(`share`: final weights, predictions, stage 1's snapshots with their file times, its PCA basis)
and `fetch` copies them into `<launch dir>/.sporeflow/runs/<run id>/`, laid out as a run dir.
Whoever can write to the artifact store could otherwise choose the weights every machine of
the team trains on: each shared file's SHA-256 is tagged on its run by the process that made it
(`TrackedRun.log_artifact(checksum=True)`), and a fetched copy whose files do not match, or
whose snapshot manifest names a file outside its folder, is not reused."""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig

from sporeflow.config.facts import container, global_batch_size
from sporeflow.config.schema import BoostConfig
from sporeflow.core.names import (
    PREDICTIONS,
    RUN_DIR_TAG,
    STEPS_PER_EPOCH_TAG,
    TEST_PREDICTIONS,
    StageKind,
)
from sporeflow.runtime.mindspore_context import Worker, barrier
from sporeflow.storage.locks import HeldLock, exclusive
from sporeflow.tracking.run_files import MANIFEST, unverified_here
from sporeflow.tracking.store_reads import StoreReads
from sporeflow.tracking.tracker import TrackedRun, Tracker

log = logging.getLogger(__name__)

STAGE1_KEYS = ("model", "dataset", "optimizer", "loss", "train", "epochs", "seed", "mode")
# how the workers split a job: a data-parallel run pads each worker's shard and splits an
# epoch's last, partial batch unevenly, so its weights differ from stand-alone's (issue 76)
LAYOUT_KEYS = ("mode", "workers", "gradients_mean", "parameter_broadcast", "search_mode", "shard")
LOCK_DIR = Path(".sporeflow") / "locks"  # under the launch dir, beside mlflow.db
MAX_SHARED_SNAPSHOTS_MB = 500  # larger snapshot sets stay on their disk: reuse is local then
PUBLISH_POLL_S = 0.2  # how often a job's end looks after its writer while turns are handed off
NOT_PUBLISHED = "%s: the MLflow store does not have its run yet; other jobs may train their own"
# this process's turns passing once the store has their run
_HANDED_OFF: list[threading.Thread] = []


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def stage1_config(cfg: DictConfig) -> str:
    """The part of the config that shapes a stage-1 run's weights and snapshots."""
    plain = container(cfg)
    key = {k: plain[k] for k in STAGE1_KEYS}
    key["snapshot"] = plain["boost"]["snapshot"]
    key["global_batch"] = global_batch_size(cfg)  # dataset.batch_size may be per worker
    key["layout"] = {k: plain["parallel"][k] for k in LAYOUT_KEYS}
    return _digest(key)


def stage1_fingerprint(cfg: DictConfig, provenance: dict[str, str]) -> str:
    """Identifies a stage-1 run: its config part and what else made it (stage.provenance)."""
    return _digest({"config": stage1_config(cfg), "provenance": provenance})


def baseline_budget(boost: BoostConfig, name: str) -> dict:
    """What a trained baseline's fingerprint holds of its budget: its epochs and (annealed)
    the anneal factor. (The budget arm's is its steps, which stage 2's cost decided.)"""
    key: dict = {"epochs": boost.baseline_epochs or boost.epochs}
    if name == StageKind.annealed:
        key["anneal_factor"] = boost.anneal_factor
    return key


def baseline_config(stage1_config_digest: str, name: str, budget: dict) -> str:
    """A baseline is shaped by stage 1 and its budget: `baseline_budget`'s, or the budget
    arm's `{"steps": steps}`."""
    key: dict = {StageKind.stage1: stage1_config_digest, StageKind.baseline: name}
    key.update(budget)
    return _digest(key)


def baseline_fingerprint(
    cfg: DictConfig, name: str, provenance: dict[str, str], budget: dict
) -> str:
    config = baseline_config(stage1_config(cfg), name, budget)
    return _digest({"config": config, "provenance": provenance})


def budget_fingerprint(cfg: DictConfig, steps: int, provenance: dict[str, str]) -> str:
    """The budget arm's: a baseline's, with its steps instead of epochs."""
    return baseline_fingerprint(cfg, StageKind.budget, provenance, {"steps": steps})


def finished_runs(reads: StoreReads, tag: str, fingerprint: str) -> list:
    """Finished runs of this experiment tagged `tag` = fingerprint, newest first."""
    return reads.finished_with_tag(tag, fingerprint)


def prefixed(run, prefix: str) -> dict:
    """A finished run's metrics under `prefix`, named without it: `final/val/` (its exported
    weights on validation: a StageResult's metrics), `test/` (on test: its test_metrics)."""
    return {k[len(prefix) :]: v for k, v in run.data.metrics.items() if k.startswith(prefix)}


def cost_metrics(run) -> dict:
    """What a finished run spent (`cost/*`, engine.cost): a reused stage carries it."""
    return {k: v for k, v in run.data.metrics.items() if k.startswith("cost/")}


def eval_curve(reads: StoreReads, run) -> list[tuple[int, dict]]:
    """A finished run's validation accuracy by epoch as [(epoch, {"acc": value})]: each evaluation's
    step over the run's steps per epoch, so `callbacks.eval_every_n_epochs=2` gives epochs 2,
    4, ... (its tag `batch.steps_per_epoch`; for runs without it, the last evaluation's step
    over the run's `epochs`: a stage always evaluates after its last epoch)."""
    history = reads.metric_history(run.info.run_id, "val/acc")
    if not history:
        return []
    per_epoch = _steps_per_epoch(run, history[-1][0])
    passes = dict(reads.metric_history(run.info.run_id, "cost/passes"))
    return [
        (step // per_epoch, {"acc": value, **({"passes": passes[step]} if step in passes else {})})
        for step, value in history
    ]


def _steps_per_epoch(run, last_step: int) -> int:
    tagged = run.data.tags.get(STEPS_PER_EPOCH_TAG)
    if tagged:
        return max(1, int(tagged))
    epochs = int(run.data.params.get("epochs", 0) or 0)
    return max(1, last_step // epochs) if epochs > 0 else max(1, last_step)


def usable_runs(reads: StoreReads, tag: str, fingerprint: str, launch_dir: Path) -> Iterator:
    """(run, its dir on this disk) of each finished run tagged `tag` = fingerprint, newest
    first; on a store other machines reach a run whose files are elsewhere is fetched. A run
    whose files here are not the ones it recorded is left out, said in a warning."""
    for run in finished_runs(reads, tag, fingerprint):
        run_dir, problem = checked_dir(reads, run, launch_dir)
        if problem:
            log.warning(
                "not reusing run %s (%s): %s; it is trained again",
                run.info.run_id,
                run_dir,
                problem,
            )
            continue
        yield run, run_dir


def local_or_fetched(reads: StoreReads, run, launch_dir: Path) -> Path:
    """A reusable run's dir: where it ran when that is on this disk, else (a store other
    machines reach) a copy of its files from the store; the run's own dir if neither."""
    run_dir = Path(run.data.tags.get(RUN_DIR_TAG, ""))
    if (run_dir / "predictions.npy").is_file() or not reads.shared:
        return run_dir
    return fetch(reads, run, launch_dir) or run_dir


def checked_dir(reads: StoreReads, run, launch_dir: Path) -> tuple[Path, str | None]:
    """local_or_fetched, and why its files may not be used (None when they may): every file
    its run recorded a SHA-256 for must match it here too, wherever the dir came from (a
    fetched copy was checked as it arrived)."""
    run_dir = local_or_fetched(reads, run, launch_dir)
    return run_dir, unverified_here(run_dir, run.data.tags)


@contextmanager
def turn(
    launch_dir: Path, worker: Worker, fingerprint: str, what: str, reads: StoreReads, tag: str
) -> Iterator[HeldLock | None]:
    """While held, no other job of this launch dir can finish a run with this fingerprint:
    rank 0 holds the lock (the other ranks wait at a barrier), so every rank's lookup inside
    sees the same store. On a store other machines reach, it also waits while another machine
    trains a run with this fingerprint (`tag`), to reuse it. A turn that trains calls
    `published` with the lock it yields (None on the other ranks) before it ends, so the lock
    passes once the next job can find the run."""
    if not worker.is_main:
        barrier(worker)
        yield None
        return

    def waiting():
        log.info(
            "%s (fingerprint %s) is being trained by another job: waiting to reuse it",
            what,
            fingerprint,
        )

    with exclusive(Path(launch_dir) / LOCK_DIR / f"{fingerprint}.lock", on_wait=waiting) as lock:
        wait_for_other_machines(reads, tag, fingerprint, what)
        barrier(worker)
        yield lock


def published(tracker: Tracker, what: str, lock: HeldLock) -> None:
    """Pass the turn (its `lock`) once the store has the run the turn trained (its writer
    applied the journal up to here), or once the writer made no progress for
    tracking.drain_timeout s (the next job then trains its own). The wait is handed to a
    thread that holds the lock, so this job goes on (stage 2, the next baseline) while its
    writer catches up (this job's next sync starts it again if it died); the job's end waits
    for it (`turns_passed`). A turn that reused a run has nothing new to wait for (a sweep's
    jobs after its first)."""
    upto = tracker.written()

    def until_applied() -> None:
        if not tracker.wait_applied_while_progressing(upto):
            log.warning(NOT_PUBLISHED, what)

    try:
        _HANDED_OFF.append(lock.hand_off(until_applied))
    except RuntimeError:  # no thread to be had: wait here (the block's end releases the lock)
        until_applied()


@contextmanager
def turns_passed(tracker: Tracker) -> Iterator[None]:
    """A job's block; at its end every turn it handed off (`published`) has passed, so no turn
    outlives its job: this thread keeps the writer alive (`Tracker.sync` starts one that died)
    while it waits for the turns' threads. A job stopped by a signal (Interrupted, Requeued)
    does not wait here: the tracker's end drains the writer once, and the kernel releases the
    turns' locks with the process."""
    try:
        yield
    except Exception:
        _pass_turns(tracker)
        raise
    except BaseException:
        _HANDED_OFF.clear()
        raise
    else:
        _pass_turns(tracker)


def _pass_turns(tracker: Tracker) -> None:
    try:
        for thread in _HANDED_OFF:
            while thread.is_alive():
                tracker.sync()
                thread.join(PUBLISH_POLL_S)
    finally:
        _HANDED_OFF.clear()


STALE_S = 600.0  # a RUNNING run silent this long belongs to a machine that is gone
UNREAD_PATIENCE = 12  # failed looks in a row (x poll_s) a wait survives before it gives up


def wait_for_other_machines(
    reads: StoreReads, tag: str, fingerprint: str, what: str, poll_s: float = 5.0
) -> None:
    """On a shared store: while a run tagged `tag` = fingerprint is RUNNING and alive (it logged
    something within STALE_S), another machine is training it: wait, then reuse it. Two
    machines that look in the same few seconds (before either run exists) each train theirs.
    A look the store does not answer while another machine's run was seen keeps the wait (for
    UNREAD_PATIENCE looks in a row): taking it for "nobody trains it" trained it twice."""
    if not reads.shared:
        return
    announced, unread = False, 0
    while True:
        running = reads.search_runs_if_read(
            f"tags.{tag} = '{fingerprint}' and attributes.status = 'RUNNING'"
        )
        if running is None:  # the store did not answer (a reset connection on a loaded server)
            unread += 1
            if not announced or unread > UNREAD_PATIENCE:
                return  # nothing seen to wait for, or the store stays away: train it here
            time.sleep(poll_s)
            continue
        unread = 0
        live = [r for r in running if time.time() - reads.last_activity(r) < STALE_S]
        if not live:
            return
        if not announced:
            log.info(
                "%s (fingerprint %s) is being trained by run %s on another machine: waiting "
                "to reuse it",
                what,
                fingerprint,
                live[0].info.run_id,
            )
            announced = True
        time.sleep(poll_s)


def share(run: TrackedRun, stage_dir: Path, snapshots: Path | None = None) -> None:
    """Leave what another machine needs to reuse this run beside it in the store: its
    predictions on both splits (its final weights are logged already) and, for stage 1, its
    snapshots with their file times, unless they are larger than MAX_SHARED_SNAPSHOTS_MB."""
    for name in (PREDICTIONS, TEST_PREDICTIONS):
        predictions = Path(stage_dir) / name
        if predictions.is_file():
            run.log_artifact(predictions, checksum=True)
    if snapshots is None or not snapshots.is_dir():
        return
    files = sorted(p for p in snapshots.iterdir() if p.is_file())
    size_mb = sum(p.stat().st_size for p in files) / 2**20
    if size_mb > MAX_SHARED_SNAPSHOTS_MB:
        log.info("stage 1's snapshots (%.0f MB) stay on this disk: no reuse elsewhere", size_mb)
        return
    run.log_artifacts(files, "snapshots", checksum=True)
    run.log_text(json.dumps({p.name: p.stat().st_mtime_ns for p in files}), f"snapshots/{MANIFEST}")


def fetch(reads: StoreReads, run, launch_dir: Path) -> Path | None:
    """Another machine's run dir for reuse (see fetched), or None, said in a warning."""
    folder, problem = reads.fetched(run, launch_dir)
    if problem:
        log.warning("not reusing run %s from %s: %s", run.info.run_id, reads.uri, problem)
    return folder
