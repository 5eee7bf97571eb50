"""MindSpore process state: execution mode, device, seeds, CPU threads, the parallel context."""

from __future__ import annotations

import logging
import os
import random
from dataclasses import dataclass

import mindspore as ms
import numpy as np
from omegaconf import DictConfig

from sporeflow.config.schema import DeviceTarget, Mode, ParallelMode
from sporeflow.core.errors import ConfigError

_MODES = {Mode.graph: ms.GRAPH_MODE, Mode.pynative: ms.PYNATIVE_MODE}
_PARALLEL = {
    ParallelMode.data: ms.ParallelMode.DATA_PARALLEL,
    ParallelMode.semi_auto: ms.ParallelMode.SEMI_AUTO_PARALLEL,
    ParallelMode.auto: ms.ParallelMode.AUTO_PARALLEL,
}


@dataclass(frozen=True)
class Worker:
    """This process's place in the job: rank `rank` of `world_size` (0 of 1 when stand-alone).
    Rank 0 is the main worker: the only one that reports (MLflow, console)."""

    rank: int = 0
    world_size: int = 1
    local_workers: int = 1  # workers on this node (msrun numbers ranks node by node)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def is_node_main(self) -> bool:
        """The first worker of its node: writes what the node's other workers read from its disk
        (snapshots, the PCA basis), so nodes need not share a filesystem."""
        return self.rank % max(1, self.local_workers) == 0

    @property
    def multi_node(self) -> bool:
        return self.world_size > self.local_workers

    def dataset_args(self) -> dict:
        """The data-set sharding that gives this worker its own part of every epoch."""
        return {"num_shards": self.world_size, "shard_id": self.rank} if self.world_size > 1 else {}


def device_problem(target: DeviceTarget) -> str | None:
    """Why this MindSpore installation cannot run on `target` (None when it can): a CPU wheel,
    or a machine without the card, would otherwise fail only once every worker has started."""
    if target is DeviceTarget.CPU:  # every MindSpore build runs on the CPU
        return None
    from mindspore import hal

    logging.disable(logging.WARNING)  # hal warns at length about each backend it cannot load
    try:
        if hal.is_available(target.value):
            return None
        usable = [
            t.value for t in DeviceTarget if t is DeviceTarget.CPU or hal.is_available(t.value)
        ]
    finally:
        logging.disable(logging.NOTSET)
    return (
        f"device_target={target.value}: this MindSpore {ms.__version__} installation has no "
        f"{target.value} device or backend; it runs on: {', '.join(usable)}"
    )


def refuse_compile_cache(environ=os.environ) -> None:
    """ConfigError while MindSpore's compile cache is switched on by its environment variable.
    Used unchecked, it finds a cached graph by its place in the process's compile order and a
    hash of the entry script's source files, not by the graph: a run with another optimizer,
    loss or network would train the graph an earlier run compiled
    (tests/e2e/test_mindspore_compile_cache.py). sporeflow's own cache (`runtime.compile_cache`,
    engine.compile_cache) checks every entry first."""
    if environ.get("MS_COMPILER_CACHE_ENABLE") == "1":
        raise ConfigError(
            "MS_COMPILER_CACHE_ENABLE=1: MindSpore's compile cache looks a graph up by compile "
            "order and source files, not by the graph, so a run with another config would use "
            "an earlier run's graph; unset MS_COMPILER_CACHE_ENABLE (sporeflow's "
            "runtime.compile_cache, on by default, checks every entry)"
        )


_CPU_THREADS: list[int] = []  # what this process gave MindSpore (it takes it once)


def set_cpu_threads(threads: int) -> None:
    """MindSpore's intra-op CPU threads. MindSpore accepts the number once per process, and a
    sweep runs several jobs in one process (the basic launcher, a joblib worker): the same
    number again is a no-op, another one a ConfigError naming the key."""
    if _CPU_THREADS:
        if _CPU_THREADS[0] != threads:
            raise ConfigError(
                f"runtime.threads={threads}: this process already runs MindSpore with "
                f"{_CPU_THREADS[0]} threads (MindSpore takes it once per process); give every "
                "job of a sweep the same runtime.threads"
            )
        return
    ms.device_context.cpu.op_tuning.threads_num(threads)
    _CPU_THREADS.append(threads)


def take_device(target: DeviceTarget) -> None:
    """MindSpore's device, before its first kernel runs (MindSpore refuses `set_device` after
    one; the same device again is a no-op): preflight's forward pass takes it, init_context
    takes it again."""
    ms.set_device(target.value)


def init_context(cfg: DictConfig) -> Worker:
    """Set mode and device (the non-deprecated `ms.set_device`), seed every RNG a run uses, and,
    for a parallel job running under msrun, join the cluster and set MindSpore's parallel context."""
    ms.set_context(mode=_MODES[cfg.mode])
    take_device(cfg.device_target)
    if cfg.runtime.threads and cfg.device_target is DeviceTarget.CPU:
        set_cpu_threads(cfg.runtime.threads)
    seed_everything(cfg.seed)
    if cfg.parallel.mode is ParallelMode.standalone:
        return Worker()
    return init_parallel(cfg.parallel)


def init_parallel(par: DictConfig) -> Worker:
    from mindspore.communication import get_group_size, get_rank, init

    init()  # on CPU: the mccl backend; msrun's scheduler process waits in here
    mode = par.mode
    kwargs = dict(
        parallel_mode=_PARALLEL[mode],
        gradients_mean=par.gradients_mean,
        device_num=par.device_num,
        parameter_broadcast=par.parameter_broadcast,
    )
    if par.all_reduce_fusion_config:
        kwargs["all_reduce_fusion_config"] = list(par.all_reduce_fusion_config)
    if mode is ParallelMode.auto:
        kwargs["search_mode"] = par.search_mode.value
    strategy = par.strategy_ckpt_config
    if strategy.save_file or strategy.load_file:
        kwargs["strategy_ckpt_config"] = {
            "save_file": strategy.save_file,
            "load_file": strategy.load_file,
            "only_trainable_params": strategy.only_trainable_params,
        }
    ms.set_auto_parallel_context(**kwargs)
    return Worker(get_rank(), get_group_size(), par.workers // par.nodes)


def seed_everything(seed: int) -> None:
    ms.set_seed(seed)
    ms.dataset.config.set_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def any_rank(worker: Worker, flag: bool) -> bool:
    """Whether `flag` is true on any rank (an AllReduce every rank must call at the same
    point; stand-alone: the flag itself). How the ranks of a job agree to stop together."""
    if worker.world_size == 1:
        return flag
    from mindspore import Tensor, ops

    votes = ops.AllReduce()(Tensor(np.array([float(flag)], np.float32))).asnumpy()
    return bool(votes[0] > 0)


def barrier(worker: Worker) -> None:
    """Wait until every rank gets here (no-op stand-alone): an AllReduce of one number."""
    if worker.world_size == 1:
        return
    from mindspore import Tensor, ops

    ops.AllReduce()(Tensor(np.ones(1, np.float32))).asnumpy()
