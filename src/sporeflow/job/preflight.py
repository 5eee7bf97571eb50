"""Every input a user can get wrong, checked before any work: the data files, a batch larger
than the training split, `resume=` (and the store's state of the run it continues), the places
the job writes (its run dir and a sqlite store: writable, with room), the compile cache's
folder, the run to fine-tune from (`train.init_from`, `train.freeze`), and a given PCA basis.
Each failure names the key or file and what is allowed (ConfigError or DataError: exit 2),
raised before a dataset is read for training, an MLflow run is created or a checkpoint is
written."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from sporeflow.config.components import build_dataset, build_model
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.core.uris import redacted
from sporeflow.dim_reduce.pca import Layout
from sporeflow.engine import compile_cache
from sporeflow.job.network_input import check_network_input
from sporeflow.job.plan import JobPlan
from sporeflow.job.runs import record_problems
from sporeflow.runtime.mindspore_context import device_problem, refuse_compile_cache
from sporeflow.stage import fine_tune
from sporeflow.storage.checkpoints import (
    checkpoint_dir,
    newest_complete_checkpoint,
)
from sporeflow.storage.files import free_bytes, unwritable
from sporeflow.storage.run_marker import RUN_MARKER, read_run_marker
from sporeflow.tracking.store import (
    experiment_refusal,
    resolve_uri,
    run_refusal,
    sqlite_refusal,
    store_refusal,
)
from sporeflow.tracking.store_reads import StoreReads


def check_inputs(plan: JobPlan) -> None:
    """Every check, in the order a user fixes things: the device, the store, the places the job
    writes, the data, what the job continues or starts from, a given basis. (`resume=` naming no run dir, or one of
    the other kind of job, was refused when the plan was made: job.plan.)"""
    cfg = plan.cfg
    problem = device_problem(plan.run.device_target)
    if problem:
        raise ConfigError(problem)
    refuse_compile_cache()
    check_compile_cache(plan.run.runtime)
    check_store(plan)
    check_places(plan)
    data = build_dataset(cfg)
    data.check()
    check_batch(plan, data.num_rows("train"))
    check_network_input(plan, data)
    check_resume(plan)
    check_resumed_runs(plan)
    check_fine_tune(plan)
    if plan.dim_reduce and plan.run.boost.pca_mat_path:
        check_basis(plan)


def check_compile_cache(runtime) -> None:
    """A `runtime.compile_cache_dir` the command cannot write to (the default folder is not
    refused: without it a job compiles, as with the cache off)."""
    problem = (
        compile_cache.folder_problem(runtime.compile_cache_dir)
        if runtime.compile_cache and runtime.compile_cache_dir
        else None
    )
    if problem:
        raise ConfigError(problem)


def check_batch(plan: JobPlan, train_rows: int) -> None:
    """Every step trains on a whole batch: a worker's batch no larger than its share of the
    training split (`train_rows` images sharded over parallel.workers, as data.sampling pads
    them). A larger one trains on nothing at all with dataset.drop_remainder=true, and without
    it on one short batch an epoch - not the batch asked for (a run that says FINISHED on a
    few updates of another batch: issue 75)."""
    workers, batch = plan.run.parallel.workers, plan.run.dataset["batch_size"]
    share = math.ceil(train_rows / workers)
    if plan.worker_batch <= share:
        return
    if workers == 1:
        raise ConfigError(
            f"dataset.batch_size={batch}: larger than the training split ({train_rows} images), "
            f"so no step would train on a whole batch; allowed: at most {train_rows}"
        )
    per_worker = plan.run.parallel.per_worker_batch
    whose = (
        "per worker (parallel.per_worker_batch=true)"
        if per_worker
        else f"is {plan.worker_batch} per worker of parallel.workers={workers}"
    )
    raise ConfigError(
        f"dataset.batch_size={batch} {whose}: larger than a worker's share of the training "
        f"split ({share} of its {train_rows} images), so no step would train on a whole batch; "
        f"allowed: at most {share if per_worker else share * workers}"
    )


def check_fine_tune(plan: JobPlan) -> None:
    """train.init_from names a finished run with weights that fit; train.freeze's prefixes."""
    if not plan.run.train.init_from and not plan.run.train.freeze:
        return
    reads = StoreReads.of_config(plan.run.tracking, plan.ctx.launch_dir)
    source = fine_tune.init_source(plan.run.train, reads)
    fine_tune.check(plan.run, build_model(plan.cfg), source)


def check_store(plan: JobPlan) -> None:
    """A database store (postgresql://...) must connect and accept the credentials, a server
    that answers must take this machine's login: no journal can make a wrong password right.
    What the store would refuse of the job's records - a deleted experiment, a name, param or
    tag over MLflow's limits - is refused here, not found by the writer after training. (An
    HTTP server that is down is not refused: its records wait in the journal,
    docs/troubleshooting.md.)"""
    tracking = plan.run.tracking
    if not tracking.enabled:
        return
    refusal = store_refusal(tracking.uri, tracking.experiment_name)
    if refusal:
        raise ConfigError(refusal)
    problems = record_problems(plan)
    if problems:
        raise ConfigError("\n".join(problems))
    uri = resolve_uri(tracking.uri, plan.ctx.launch_dir)
    refusal = experiment_refusal(uri, tracking.experiment_name)
    if refusal:
        raise ConfigError(f"tracking.experiment_name={tracking.experiment_name}: {refusal}")


def check_resume(plan: JobPlan) -> None:
    """A plain run continued: a readable checkpoint in this node's dir, of this network. (A
    pipeline's stages read their checkpoints when each is continued.)"""
    if plan.resume is None or plan.dim_reduce:
        return
    resume = plan.run.resume
    here = checkpoint_dir(plan.resume.run_dir, plan.first_local_rank, plan.run.parallel.workers)
    try:
        path, state = newest_complete_checkpoint(here)
    except CheckpointError as ex:
        raise ConfigError(f"resume={resume}: {ex}") from None
    network = build_model(plan.cfg)
    for name, param in network.parameters_and_names():
        if name not in state:
            raise ConfigError(
                f"resume={resume}: {path} is not a checkpoint of {type(network).__name__} "
                f"(it has no parameter {name!r}); model={plan.run.model['_target_']}"
            )
        if tuple(state[name].shape) != tuple(param.shape):
            raise ConfigError(
                f"resume={resume}: {path} holds {name} with shape {tuple(state[name].shape)}, "
                f"this network's is {tuple(param.shape)}: another network or num_classes"
            )


def check_basis(plan: JobPlan) -> None:
    """boost.pca_mat_path: a plain float .npy of shape (n_component, trainable weights); a file
    of pickled objects is refused without being unpickled."""
    boost = plan.run.boost
    assert boost.pca_mat_path is not None, "check_inputs checks a given basis only"
    key = f"boost.pca_mat_path={boost.pca_mat_path}"
    path = Path(boost.pca_mat_path).expanduser()
    if not path.is_file():
        raise ConfigError(f"{key}: no such file")
    try:  # the header alone: the array is never loaded, a pickle never unpickled
        with open(path, "rb") as f:
            version = np.lib.format.read_magic(f)
            shape, _, dtype = np.lib.format._read_array_header(f, version)  # type: ignore[attr-defined]  # noqa: SLF001 - numpy's own reader
    except (ValueError, OSError) as ex:
        raise ConfigError(f"{key}: not a .npy array ({ex})") from None
    if dtype.hasobject:
        raise ConfigError(
            f"{key}: the file holds pickled Python objects, which sporeflow never loads; "
            "save the basis with numpy.save(path, array.astype('float32'))"
        )
    if dtype not in (np.float32, np.float64):
        raise ConfigError(f"{key}: dtype {dtype}; allowed: float32, float64")
    want = (boost.n_component, Layout.of(build_model(plan.cfg)).total)
    if tuple(shape) != want:
        raise ConfigError(
            f"{key}: shape {tuple(shape)}; this network and boost.n_component={want[0]} need {want}"
        )


# Free space a run dir needs before a job starts: its first records (the journal's header,
# params and tags take ~20 KB, an epoch of metrics a few KB more) and a small network's
# checkpoint. A disk that fills later still ends the run with one line (storage.files).
RECORDS_ROOM = 256 * 1024


def check_places(plan: JobPlan) -> None:
    """Every place the job writes, tried before work (issue 77): its run dir (checkpoints and
    the tracking journal, with room for the run's first records) and a sqlite store (its file,
    folder and the default store's artifact folder). A read-only store was found by the writer
    after the training, its cause only in writer.log; a full disk ended in chained tracebacks."""
    key = "hydra.sweep.dir" if plan.ctx.sweep is not None else "hydra.run.dir"
    check_writes(key, (plan.ctx.run_dir, plan.home), plan.run.tracking, plan.ctx.launch_dir)


def check_writes(key: str, run_dirs: Iterable[Path], tracking, launch_dir: Path) -> None:
    """check_places for any command that writes a run dir (train.py's jobs, eval.py): each of
    `run_dirs` (named by `key`) writable with RECORDS_ROOM free, the store (`tracking`) too."""
    for run_dir in dict.fromkeys(run_dirs):
        problem = unwritable(run_dir)
        if problem:
            raise ConfigError(
                f"{key}: {run_dir} cannot be written ({problem}); give {key}=<a writable folder>"
            )
        free = free_bytes(run_dir)
        if free < RECORDS_ROOM:
            raise ConfigError(
                f"{key}: {run_dir} has {free / 1024:.0f} KB free on its device; a run needs at "
                f"least {RECORDS_ROOM // 1024} KB there for its tracking records and "
                f"checkpoints: free space there, or give {key}=<a folder on a larger disk>"
            )
    if not tracking.enabled:
        return
    uri = resolve_uri(tracking.uri, launch_dir)
    refusal = sqlite_refusal(uri, launch_dir)
    if refusal:
        raise ConfigError(f"{_store_named(tracking.uri, uri)}: {refusal}")


def _store_named(configured: str | None, uri: str) -> str:
    """The store as what chose it: the key, the variable, or the default (the launch folder's)."""
    if configured:
        return f"tracking.uri={redacted(uri)}"
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return f"MLFLOW_TRACKING_URI={redacted(uri)}"
    return f"the default store {redacted(uri)} (the launch folder's; tracking.uri sets another)"


def check_resumed_runs(plan: JobPlan) -> None:
    """The MLflow runs `resume=` continues (every marker in the run dir: a plain run's, a
    pipeline's parent and stages) are not deleted in the store: MLflow takes no record for a
    deleted run, so the resumed training's records waited in the journal for a run that never
    came (issue 77). Refused naming the restore command."""
    if plan.resume is None or not plan.run.tracking.enabled:
        return
    uri = resolve_uri(plan.run.tracking.uri, plan.ctx.launch_dir)
    for marker in sorted(plan.resume.node0_dir.rglob(RUN_MARKER)):
        ref = read_run_marker(marker.parent).get("mlflow_run_id")
        refusal = run_refusal(uri, str(ref)) if ref else None
        if refusal:
            raise ConfigError(
                f"resume={plan.run.resume}: {refusal} to continue it, or start a new run "
                "without resume="
            )
