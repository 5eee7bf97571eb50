"""MindSpore process state: execution mode, device, seeds, CPU threads."""
from __future__ import annotations

import random

import mindspore as ms
import numpy as np
from omegaconf import DictConfig

_MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}


def init_context(cfg: DictConfig) -> None:
    """Set mode and device (the non-deprecated `ms.set_device`) and seed every RNG a run uses."""
    ms.set_context(mode=_MODES[cfg.mode.value])
    ms.set_device(cfg.device_target.value)
    if cfg.runtime.threads and cfg.device_target.value == "CPU":
        ms.device_context.cpu.op_tuning.threads_num(cfg.runtime.threads)
    seed_everything(cfg.seed)


def seed_everything(seed: int) -> None:
    ms.set_seed(seed)
    ms.dataset.config.set_seed(seed)
    np.random.seed(seed)
    random.seed(seed)
