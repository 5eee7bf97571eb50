"""sporeflow entry: `python train.py [group=option ...] [key=value ...]` (Hydra CLI; see --help)."""

import hydra
from omegaconf import DictConfig

from sporeflow.entry.app import run_cli, run_task
from sporeflow.entry.hydra_setup import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    """Compose -> validate -> launch; returns the final eval accuracy (what a sweeper optimises)."""
    return run_task(cfg)


if __name__ == "__main__":
    run_cli(main)
