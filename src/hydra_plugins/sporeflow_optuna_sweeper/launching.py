"""What sporeflow's sweepers (Optuna's and the race) share: a sweeper that launches its jobs
through the launcher Hydra is configured with, and how a sweeper's config is registered."""

# (no `from __future__ import annotations`: see optuna_sweeper.py)
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from hydra.core.plugins import Plugins
from hydra.plugins.sweeper import Sweeper
from omegaconf import DictConfig

from sporeflow.config import objective
from sporeflow.core.errors import ConfigError


class LaunchingSweeper(Sweeper):
    """setup(): the composed config kept, Hydra's configured launcher made. A sporeflow
    sweeper chooses between its jobs by what each returns: `refuse_choice_on_test` first."""

    config: Optional[DictConfig] = None
    launcher: Any = None
    option = "an optimising sweeper"  # how a user selects it (hydra/sweeper=<option>)

    def refuse_choice_on_test(self) -> None:
        """Before a sweep dir, a study or a trial: an app whose return value is measured on the
        test split (eval.py split=test) is refused (objective.choice_on_test_refusal)."""
        assert self.config is not None, "setup first"
        refused = objective.choice_on_test_refusal(self.config, self.option)
        if refused:
            raise ConfigError(refused)

    def setup(self, *, hydra_context, task_function, config: DictConfig) -> None:
        self.config = config
        self.launcher = Plugins.instance().instantiate_launcher(
            hydra_context=hydra_context, task_function=task_function, config=config
        )


def register(name: str, node: Any) -> None:
    """`hydra/sweeper=<name>` selects the sweeper whose config dataclass is `node`."""
    ConfigStore.instance().store(group="hydra/sweeper", name=name, node=node, provider="sporeflow")
