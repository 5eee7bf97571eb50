"""A Hydra app that is not sporeflow (no `sweep.objective`, no `boost`): the official Hydra
Optuna sweeper's example objective, x^2 + y^2, to run this project's sweeper the way any Hydra
user would. `error=true` raises; `returns=text` returns a string; `returns=infinite` inf; `+sleep=S` takes S seconds."""

import time

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def sphere(cfg: DictConfig):
    time.sleep(cfg.get("sleep", 0))  # a job that takes a while (shared-study tests)
    if cfg.get("error"):
        raise RuntimeError("cfg.error is True")
    if cfg.get("returns") == "text":
        return "not a number"
    if cfg.get("returns") == "infinite":
        return float("inf")
    return cfg.x**2 + cfg.y**2


if __name__ == "__main__":
    sphere()
