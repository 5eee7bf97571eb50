"""sporeflow entry: `python train.py [group=option ...] [key=value ...]` (Hydra CLI; see --help)."""

from sporeflow.core import signals

signals.exit_at_once()  # a Ctrl-C while this loads ends it at once, in one line

import hydra  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from sporeflow.entry.app import run_cli, run_task  # noqa: E402
from sporeflow.entry.hydra_setup import register_configs  # noqa: E402

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Compose -> validate -> launch; returns the final eval accuracy (what a sweeper optimises)."""
    return run_task(cfg)


if __name__ == "__main__":
    run_cli(main)
