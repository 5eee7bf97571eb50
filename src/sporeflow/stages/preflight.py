"""Every input a user can get wrong, checked before any work: the data files, `resume=`, the
run to fine-tune from (`train.init_from`, `train.freeze`), and a given PCA basis. Each failure
names the key or file and what is allowed (ConfigError or DataError: exit 2), raised before a
dataset is read for training, an MLflow run is created or a checkpoint is written."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from omegaconf import DictConfig

from sporeflow.config.components import build_dataset, build_model
from sporeflow.config.facts import first_local_rank, is_dim_reduce
from sporeflow.core.context import RunContext
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.dim_reduce.pca import Layout
from sporeflow.runtime.mindspore_context import device_problem, refuse_compile_cache
from sporeflow.stages import fine_tune
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    newest_complete_checkpoint,
)
from sporeflow.storage.run_marker import find_resume_dir, is_pipeline_dir, resume_off
from sporeflow.tracking.store import store_refusal
from sporeflow.tracking.tracker import Tracker


def check_inputs(cfg: DictConfig, ctx: RunContext) -> None:
    problem = device_problem(cfg.device_target)
    if problem:
        raise ConfigError(problem)
    refuse_compile_cache()
    check_store(cfg.tracking)
    build_dataset(cfg).check()
    check_resume(cfg, ctx)
    check_fine_tune(cfg, ctx)
    if is_dim_reduce(cfg) and cfg.boost.pca_mat_path:
        check_basis(cfg)


def check_fine_tune(cfg: DictConfig, ctx: RunContext) -> None:
    """train.init_from names a finished run with weights that fit; train.freeze's prefixes."""
    if not cfg.train.init_from and not cfg.train.freeze:
        return
    lookup = Tracker.from_config(cfg.tracking, ctx.launch_dir, read_only=True)
    fine_tune.check(cfg, build_model(cfg), fine_tune.init_source(cfg, lookup))


def check_store(tracking: DictConfig) -> None:
    """A database store (postgresql://...) must connect and accept the credentials, a server
    that answers must take this machine's login: no journal can make a wrong password right.
    (An HTTP server that is down is not refused: its records wait in the journal,
    docs/troubleshooting.md.)"""
    refusal = store_refusal(tracking.uri, tracking.experiment_name) if tracking.enabled else None
    if refusal:
        raise ConfigError(refusal)


def check_resume(cfg: DictConfig, ctx: RunContext) -> None:
    """The folder, a readable checkpoint in it, and that it is a checkpoint of this network."""
    if resume_off(cfg.resume):
        return
    try:
        run_dir = find_resume_dir(cfg.resume, ctx.launch_dir, cfg.parallel.node_rank)
        mismatch = _pipeline_mismatch(cfg, run_dir)
        if mismatch:
            raise ConfigError(f"resume={cfg.resume}: {mismatch}")
        if is_dim_reduce(cfg):  # each stage's checkpoints are read when it is continued
            return
        here = checkpoint_dir(run_dir, first_local_rank(cfg), cfg.parallel.workers)  # a node's own
        path, state = newest_complete_checkpoint(here)
    except CheckpointError as ex:
        why = str(ex)  # find_resume_dir's own messages already name the key
        raise ConfigError(
            why if why.startswith("resume=") else f"resume={cfg.resume}: {why}"
        ) from None
    network = build_model(cfg)
    for name, param in network.parameters_and_names():
        if name not in state:
            raise ConfigError(
                f"resume={cfg.resume}: {path} is not a checkpoint of {type(network).__name__} "
                f"(it has no parameter {name!r}); model={cfg.model._target_}"
            )
        if tuple(state[name].shape) != tuple(param.shape):
            raise ConfigError(
                f"resume={cfg.resume}: {path} holds {name} with shape {tuple(state[name].shape)}, "
                f"this network's is {tuple(param.shape)}: another network or num_classes"
            )


def _pipeline_mismatch(cfg: DictConfig, run_dir: Path | None) -> str | None:
    """Why a run dir cannot be continued by this job's kind (plain vs dim-reduce pipeline)."""
    pipeline = run_dir is not None and is_pipeline_dir(run_dir, cfg.parallel.node_rank)
    if is_dim_reduce(cfg) and not pipeline:
        return f"{run_dir} is a plain run's dir; a boost=dim_reduce job continues only a pipeline's"
    if pipeline and not is_dim_reduce(cfg):
        return (
            f"{run_dir} is a dim-reduce pipeline's dir; continue it with its own boost=dim_reduce"
        )
    return None


def check_basis(cfg: DictConfig) -> None:
    """boost.pca_mat_path: a plain float .npy of shape (n_component, trainable weights); a file
    of pickled objects is refused without being unpickled."""
    key = f"boost.pca_mat_path={cfg.boost.pca_mat_path}"
    path = Path(cfg.boost.pca_mat_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{key}: no such file")
    try:  # the header alone: the array is never loaded, a pickle never unpickled
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, _, dtype = np.lib.format._read_array_header(f, version)  # noqa: SLF001 - numpy's own reader
    except (ValueError, OSError) as ex:
        raise ConfigError(f"{key}: not a .npy array ({ex})") from None
    if dtype.hasobject:
        raise ConfigError(
            f"{key}: the file holds pickled Python objects, which sporeflow never loads; "
            "save the basis with numpy.save(path, array.astype('float32'))"
        )
    if dtype not in (np.float32, np.float64):
        raise ConfigError(f"{key}: dtype {dtype}; allowed: float32, float64")
    want = (cfg.boost.n_component, Layout.of(build_model(cfg)).total)
    if tuple(shape) != want:
        raise ConfigError(
            f"{key}: shape {tuple(shape)}; this network and boost.n_component={want[0]} need {want}"
        )
