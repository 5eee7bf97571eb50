"""What a run knows about where it runs: directories, overrides, commit. Plain data, no Hydra."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional


@dataclass
class RunContext:
    run_dir: Path                      # Hydra's output dir for this job: checkpoints go here
    launch_dir: Path                   # where the command was started: mlflow.db goes here
    overrides: List[str] = field(default_factory=list)
    hydra_dir: Optional[Path] = None   # <run_dir>/.hydra with config.yaml and overrides.yaml
    git_commit: Optional[str] = None   # of the sporeflow code that runs (not of the launch dir)
    git_dirty: Optional[bool] = None   # uncommitted changes to tracked files
    entry_script: Optional[Path] = None  # train.py: what msrun re-runs for a parallel job


def worker_batch_size(cfg) -> int:
    """The batch one worker feeds per step. `dataset.batch_size` is the global batch, split
    evenly across `parallel.workers`, so adding parallel=dataN runs the same experiment;
    `parallel.per_worker_batch=true` makes it per worker instead (the seeds' recipes)."""
    if cfg.parallel.per_worker_batch:
        return cfg.dataset.batch_size
    return cfg.dataset.batch_size // cfg.parallel.workers


def global_batch_size(cfg) -> int:
    return worker_batch_size(cfg) * cfg.parallel.workers
