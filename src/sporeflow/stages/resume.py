"""`resume=` checked before any work: the folder, a readable checkpoint in it, and that the
checkpoint is of this network. A bad answer is a config error naming `resume=` (exit 2),
raised before a dataset is read or an MLflow run is touched."""
from __future__ import annotations

from omegaconf import DictConfig

from sporeflow.checkpoints import CheckpointError, checkpoint_dir, find_resume_dir, newest_complete_checkpoint
from sporeflow.components import build_model
from sporeflow.context import RunContext
from sporeflow.errors import ConfigError


def check_resume(cfg: DictConfig, ctx: RunContext) -> None:
    if cfg.resume in (False, "false", "False", "", None):
        return
    try:
        run_dir = find_resume_dir(cfg.resume, ctx.launch_dir)
        world = cfg.parallel.workers
        path, state = newest_complete_checkpoint(checkpoint_dir(run_dir, 0, world))
    except CheckpointError as ex:
        raise ConfigError(f"resume={cfg.resume}: {ex}") from None
    network = build_model(cfg)
    for name, param in network.parameters_and_names():
        if name not in state:
            raise ConfigError(f"resume={cfg.resume}: {path} is not a checkpoint of {type(network).__name__} "
                              f"(it has no parameter {name!r}); model={cfg.model._target_}")
        if tuple(state[name].shape) != tuple(param.shape):
            raise ConfigError(f"resume={cfg.resume}: {path} holds {name} with shape {tuple(state[name].shape)}, "
                              f"this network's is {tuple(param.shape)}: another network or num_classes")
