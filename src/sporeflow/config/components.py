"""Build the user-swappable components from their `_target_` nodes (hydra.utils.instantiate).

Kept apart from the stages so a stage receives built objects and never touches Hydra's app
machinery; `instantiate` is used here only as a library call. Keys and required arguments
were checked against each target's signature before any work (validation.validate): an error
raised while building comes from the component's own code, so it keeps its traceback (exit 1)
rather than being reported as a typo in the config.
"""

from __future__ import annotations

import inspect
from typing import Any

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig


def _build(node: DictConfig, **overrides: Any) -> Any:
    """instantiate, with the component's own exception (not Hydra's wrapper) raised."""
    try:
        return instantiate(node, **overrides)
    except InstantiationException as ex:
        if ex.__cause__ is not None:
            raise ex.__cause__ from None
        raise


def build_dataset(cfg: DictConfig, **overrides: Any):
    """The dataset with the run's augmentation recipe (`augment.ops`, training split only);
    `overrides` replace config values (a worker's share of the batch)."""
    dataset = _build(cfg.dataset, **overrides)
    augment = cfg.get("augment")
    if augment is not None and augment.ops:
        dataset.recipe = tuple(_value(op) for op in augment.ops)
    if mixing(cfg):
        dataset.mix = (_value(cfg.augment.mix), float(cfg.augment.mix_alpha))
    return dataset


def _value(option: Any) -> str:
    return str(getattr(option, "value", option))


def mixing(cfg: DictConfig) -> bool:
    """Whether the training split's batches are mixed (augment.mix: soft labels)."""
    augment = cfg.get("augment")
    return augment is not None and _value(augment.get("mix", "none")) != "none"


def build_model(cfg: DictConfig):
    return _build(cfg.model)


def build_loss(cfg: DictConfig):
    return _build(cfg.loss)


def build_train_loss(cfg: DictConfig):
    """The loss the training step minimises: the configured one, or with mixed batches softmax
    cross entropy on their soft labels with the configured label smoothing (schema refuses
    losses that take integer labels only)."""
    if not mixing(cfg):
        return build_loss(cfg)
    from sporeflow.nn.losses import SoftTargetCrossEntropy

    smooth = float(cfg.loss.get("smooth_factor", 0.0))
    return SoftTargetCrossEntropy(smooth, int(cfg.dataset.num_classes))


def build_optimizer(
    cfg: DictConfig,
    params: list,
    steps_per_epoch: int | None = None,
    epochs: int | None = None,
    lr: float | None = None,
    schedule: dict | None = None,
):
    """The optimizer over `params`; schedules get the stage's steps (batches) per epoch, epoch
    count (`epochs`, default the config's) and `train.accumulation_steps` (batches per
    optimizer update: a schedule has one rate per update; passed to a factory that takes it),
    `lr` replaces optimizer.lr (a stage's own rate) and `schedule` optimizer.schedule (a
    stage's own: the budget arm's linear decay to zero)."""
    overrides: dict[str, Any] = {} if lr is None else {"lr": lr}
    if schedule is not None:
        overrides["schedule"] = schedule
    factory = _build(cfg.optimizer, **overrides)
    if not (callable(factory) and cfg.optimizer.get("_partial_", False)):
        return factory
    epochs = cfg.epochs if epochs is None else epochs
    supplied: dict[str, Any] = {"steps_per_epoch": steps_per_epoch, "epochs": epochs}
    if _takes(factory, "accumulation_steps"):
        supplied["accumulation_steps"] = int(cfg.train.accumulation_steps)
    return factory(params, **supplied)


def _takes(factory: Any, name: str) -> bool:
    """Whether `factory` takes the keyword `name` (a user's factory written before it was
    supplied may not)."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def build_hook(node: DictConfig):
    """One of `callbacks.hooks` (an engine.hooks.HookBase subclass, checked by validation)."""
    return _build(node)
