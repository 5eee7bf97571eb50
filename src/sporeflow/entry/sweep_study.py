"""What a sweep's config says about its jobs and its Optuna study: the swept keys, the study's
tags (how every process of one study finds its one parent run), a job's trial link for the
pruner, and which model a sweep registers."""

from __future__ import annotations

import os
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from sporeflow.config import search_space
from sporeflow.core.context import TRIAL_ID_ENV, TrialLink
from sporeflow.core.names import OPTUNA_STORAGE_TAG, OPTUNA_STUDY_TAG, STAGE_TAG, StageKind
from sporeflow.core.uris import database_lock, redacted
from sporeflow.tracking.store_reads import StoreReads


def swept_keys(config: DictConfig) -> list[str]:
    """The keys a sweep varies: command-line sweep overrides (a=1,2 / range / choice) and the
    sweeper's `params` (Optuna's search space, or BasicSweeper's), less those the command line
    fixes (config.search_space's rules, which the Optuna sweeper follows)."""
    task = OmegaConf.to_container(config.hydra.overrides.task)
    params = OmegaConf.to_container(config.hydra.sweeper.get("params") or OmegaConf.create({}))
    return [key.lstrip("+~") for key in search_space.build(params, task).keys]


def study_tags(config: DictConfig) -> dict:
    """An Optuna sweep with a storage: the tags naming its study. Every process of the study
    (another machine, a restart) finds the one parent run by them; {} for any other sweep."""
    sweeper = config.hydra.sweeper
    if sweeper.get("_target_") != search_space.OPTUNA_SWEEPER or not sweeper.get("storage"):
        return {}
    url = search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd))
    return {OPTUNA_STUDY_TAG: str(sweeper.study_name), OPTUNA_STORAGE_TAG: redacted(str(url))}


def study_storage(config: DictConfig) -> tuple[str, str]:
    """An Optuna sweep's (study name, storage URL), read for its importances at the end;
    ("", "") for any other sweep or a study kept in memory."""
    if not study_tags(config):
        return "", ""
    sweeper = config.hydra.sweeper
    url = search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd))
    return str(sweeper.study_name), str(url)


def study_lock(config: DictConfig) -> AbstractContextManager:
    """Held while a process finds or creates its study's parent run, until the store has it:
    on a PostgreSQL study storage an advisory lock per study, so two processes starting at
    once cannot each find none and create one. Other storages: no lock (the first-created
    parent still wins afterwards, `study_parent`)."""
    sweeper = config.hydra.sweeper
    if not study_tags(config):
        return nullcontext()
    url = str(search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd)))
    return database_lock(url, f"sporeflow sweep parent of study {sweeper.study_name}")


def study_parent(reads: StoreReads, study: dict) -> Any:
    """The study's parent run: the first created (start time, then id), so processes that
    created one each at the same moment agree on it; None when there is none yet."""
    quoted = {k: v.replace("'", "\\'") for k, v in study.items()}
    runs = reads.search_runs(
        f"tags.{STAGE_TAG} = 'sweep' and "
        + " and ".join(f"tags.`{k}` = '{v}'" for k, v in quoted.items()),
        max_results=100,
    )
    return min(runs, key=lambda r: (r.info.start_time, r.info.run_id), default=None)


def trial_link(config: DictConfig) -> TrialLink | None:
    """A job of an Optuna sweep with a pruner: where its trial is (the sweeper put the trial's
    id in the job's environment, hydra.job.env_set); None for any other job."""
    trial_id = os.environ.get(TRIAL_ID_ENV)
    sweeper = config.hydra.sweeper
    if not trial_id or sweeper.get("_target_") != search_space.OPTUNA_SWEEPER:
        return None
    if sweeper.get("pruner", "none") == "none":
        return None
    return TrialLink(
        storage=str(search_space.storage_url(sweeper.storage, Path(config.hydra.runtime.cwd))),
        study=sweeper.study_name,
        trial_id=int(trial_id),
        pruner=sweeper.pruner,
        min_epochs=int(sweeper.pruner_min_epochs),
        startup_trials=int(sweeper.n_startup_trials),
    )


def registered_model_name(config: DictConfig) -> str:
    """`sweep.registered_model`, else "<model>-<dataset>" (a plain job run's name)."""
    from sporeflow.job.runs import base_name

    chosen = config.sweep.registered_model
    return base_name(config) if chosen is None else chosen


def model_stage(key: str) -> str:
    """The stage whose model the objective (a metric key of the job's run) ranks:
    val/stage1/acc -> stage1, val/gain -> stage2 (the pipeline's result), final/val/acc ->
    train (a plain job)."""
    if key.startswith("final/"):
        return StageKind.train
    named = key.removeprefix("val/")
    return named.split("/", 1)[0] if "/" in named else StageKind.stage2
