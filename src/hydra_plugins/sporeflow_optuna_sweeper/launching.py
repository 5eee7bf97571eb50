"""What sporeflow's sweepers (Optuna's and the race) share: a sweeper that launches its jobs
through the launcher Hydra is configured with, and how a sweeper's config is registered."""

# (no `from __future__ import annotations`: see optuna_sweeper.py)
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig


class LaunchingSweeper(Sweeper):
    """setup(): the composed config kept, Hydra's configured launcher made."""

    config: Optional[DictConfig] = None
    launcher: Any = None

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )


def register(name: str, node: Any) -> None:
    """`hydra/sweeper=<name>` selects the sweeper whose config dataclass is `node`."""
    ConfigStore.instance().store(group="hydra/sweeper", name=name, node=node, provider="sporeflow")
