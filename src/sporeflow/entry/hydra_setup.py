"""What Hydra must know before it composes a config: sporeflow's schema in its ConfigStore and
sporeflow's resolvers. train.py and eval.py call `register_configs()` at import (so do the
tests)."""

from __future__ import annotations

from omegaconf import OmegaConf

from sporeflow.config.schema import EVAL_SCHEMA_NAME, SCHEMA_NAME, EvalConfig, RunConfig
from sporeflow.launch import slurm
from sporeflow.storage import run_marker, rundir


def register_configs() -> None:
    """Put the schema in Hydra's ConfigStore (train.yaml lists it first in its defaults) and
    register `${sporeflow.uid:}` (run and sweep dir names), `${sporeflow.slurm:...}` and the
    run dir of a resumed run (`${sporeflow.run_dir:...}`, `${sporeflow.hydra_subdir:...}`)."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name=SCHEMA_NAME, node=RunConfig)
    ConfigStore.instance().store(name=EVAL_SCHEMA_NAME, node=EvalConfig)
    # cached: Hydra copies resolver caches into each job's config, so a joblib/submitit worker
    # process resolves the sweep dir to the main process's name, not a new uid of its own
    OmegaConf.register_new_resolver("sporeflow.uid", rundir.uid, replace=True, use_cache=True)
    OmegaConf.register_new_resolver(
        "sporeflow.slurm", slurm.resolve, replace=True
    )  # per task: not cached
    # resume=<run dir> | true: Hydra's run dir is the resumed one (no stray new dir), and its
    # config goes to .hydra/resume-<time> beside the run's own
    OmegaConf.register_new_resolver("sporeflow.run_dir", run_marker.hydra_run_dir, replace=True)
    OmegaConf.register_new_resolver(
        "sporeflow.hydra_subdir", run_marker.hydra_output_subdir, replace=True
    )
