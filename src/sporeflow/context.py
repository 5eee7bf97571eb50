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
    git_commit: Optional[str] = None
    entry_script: Optional[Path] = None  # train.py: what msrun re-runs for a parallel job
