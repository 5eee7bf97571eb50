"""Build the user-swappable components from their `_target_` nodes (hydra.utils.instantiate).

Kept apart from the stages so a stage receives built objects and never touches Hydra's app
machinery; `instantiate` is used here only as a library call.
"""
from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig

from sporeflow.errors import ConfigError


def _build(group: str, node: DictConfig, **kwargs: Any) -> Any:
    try:
        return instantiate(node, **kwargs)
    except Exception as ex:  # instantiate wraps the target's own error; keep its message
        cause = ex.__cause__ or ex
        if isinstance(cause, (ValueError, TypeError)):
            raise ConfigError(f"{group} ({node.get('_target_')}): {cause}") from ex
        raise


def build_dataset(cfg: DictConfig):
    return _build("dataset", cfg.dataset)


def build_model(cfg: DictConfig):
    return _build("model", cfg.model)


def build_loss(cfg: DictConfig):
    return _build("loss", cfg.loss)


def build_optimizer(cfg: DictConfig, params: list, steps_per_epoch: int | None = None):
    """The optimizer over `params`; schedules get the stage's steps per epoch and epoch count."""
    factory = _build("optimizer", cfg.optimizer)
    if not (callable(factory) and cfg.optimizer.get("_partial_", False)):
        return factory
    try:
        return factory(params, steps_per_epoch=steps_per_epoch, epochs=cfg.epochs)
    except (ValueError, TypeError) as ex:  # e.g. a bad schedule name or key
        raise ConfigError(f"optimizer ({cfg.optimizer._target_}): {ex}") from ex
