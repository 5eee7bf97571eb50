"""Reuse by fingerprint. Stage 1 and the baselines of a dim-reduce pipeline depend on less than
the whole config (not on rho, gamma, alpha, sigma or n_component), so a sweep over stage-2
settings trains stage 1 once and each baseline once: a finished run whose fingerprint tag
matches is reused. Concurrent jobs (joblib, submitit) take turns per fingerprint under a file
lock in the launch dir, so the second job waits for the first one's run instead of training
its own copy."""

from __future__ import annotations

import hashlib
import json
import logging
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sporeflow.core.context import global_batch_size
from sporeflow.runtime.mindspore_context import Worker, barrier
from sporeflow.storage.locks import exclusive
from sporeflow.tracking.tracker import Tracker

log = logging.getLogger(__name__)

STAGE1_KEYS = ("model", "dataset", "optimizer", "loss", "train", "epochs", "seed", "mode")
LOCK_DIR = Path(".sporeflow") / "locks"  # under the launch dir, beside mlflow.db


def _digest(key: dict) -> str:
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]


def stage1_fingerprint(cfg: DictConfig) -> str:
    """Identifies a stage-1 run by everything that shapes its weights and snapshots."""
    container = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    key = {k: container[k] for k in STAGE1_KEYS}
    key["snapshot"] = container["boost"]["snapshot"]
    key["global_batch"] = global_batch_size(cfg)  # dataset.batch_size may be per worker
    return _digest(key)


def baseline_fingerprint(cfg: DictConfig, stage1: str, name: str) -> str:
    """A baseline is shaped by stage 1, its epoch budget and (annealed) the anneal factor."""
    key = {
        "stage1": stage1,
        "baseline": name,
        "epochs": cfg.boost.baseline_epochs or cfg.boost.epochs,
    }
    if name == "annealed":
        key["anneal_factor"] = cfg.boost.anneal_factor
    return _digest(key)


def finished_runs(tracker: Tracker, tag: str, fingerprint: str) -> list:
    """Finished runs of this experiment tagged `tag` = fingerprint, newest first."""
    return tracker.search_runs(f"tags.{tag} = '{fingerprint}' and attributes.status = 'FINISHED'")


def final_metrics(run) -> dict:
    return {k[len("final/") :]: v for k, v in run.data.metrics.items() if k.startswith("final/")}


def eval_curve(tracker: Tracker, run_id: str) -> list[tuple[int, dict]]:
    """A finished run's per-epoch eval accuracy as [(epoch, {"acc": value})] (one eval per epoch)."""
    return [
        (epoch, {"acc": value})
        for epoch, (_, value) in enumerate(tracker.metric_history(run_id, "eval/acc"), start=1)
    ]


@contextmanager
def turn(launch_dir: Path, worker: Worker, fingerprint: str, what: str, tracker: Tracker):
    """While held, no other job of this launch dir can finish a run with this fingerprint:
    rank 0 holds the lock (the other ranks wait at a barrier), so every rank's lookup inside
    sees the same store. The lock is let go once the store has the run this turn trained (the
    journal's writer applied it), or after tracking.drain_timeout: the next job then finds it,
    or trains its own."""
    if not worker.is_main:
        barrier(worker)
        yield
        return

    def waiting():
        log.info(
            "%s (fingerprint %s) is being trained by another job: waiting to reuse it",
            what,
            fingerprint,
        )

    with exclusive(Path(launch_dir) / LOCK_DIR / f"{fingerprint}.lock", on_wait=waiting):
        barrier(worker)
        yield
        if not tracker.wait_applied(tracker.drain_timeout):
            log.warning(
                "%s: the MLflow store does not have its run yet; other jobs may train their own",
                what,
            )
