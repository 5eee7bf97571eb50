"""Settings a command sets that its run will not use: those of a node that is off (boost's
with boost=none, the EMA's with train.ema.enabled=false, the mixing ratio's without
augment.mix). Not an error - a sweep may set them for every job - but said once, naming the
option that would use them."""

from __future__ import annotations

from omegaconf import DictConfig

from sporeflow.config.components import mixing
from sporeflow.config.facts import is_dim_reduce


def override_key(override: str) -> str:
    """The key a command-line override sets: `+optimizer.lr=0.1` -> `optimizer.lr`."""
    return override.lstrip("+~").split("=", 1)[0]


def unused_settings(cfg: DictConfig, overrides: list[str]) -> list[str]:
    """One line per override that has no effect on this run."""
    found = []
    for override in overrides:
        key = override_key(override)
        if key.startswith("boost.") and key != "boost.name" and not is_dim_reduce(cfg):
            found.append(
                f"{override} has no effect: boost=none (it is a setting of boost=dim_reduce)"
            )
        elif (
            key.startswith("train.ema.")
            and key != "train.ema.enabled"
            and not cfg.train.ema.enabled
        ):
            found.append(f"{override} has no effect while train.ema.enabled=false")
        elif key == "augment.mix_alpha" and not mixing(cfg):
            found.append(f"{override} has no effect while augment.mix=none")
    return found
