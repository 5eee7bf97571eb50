"""A finished run as the start of the next experiment: where its weights and its config are.

`source=` names a run dir (`outputs/<date>/<time>_<id>`), one of its stage dirs (`.../stage2`),
an MLflow run id or the run's key (`sf-...`, what sporeflow_run.json holds), a registered model
version (`models:/<name>/<version>`, `models:/<name>@<alias>`: the run that made it), or a
`.ckpt` / `.safetensors` checkpoint (its weights; the config of
the run dir it lies in, and none outside one: eval.py then takes the network and data from its
command line). A run dir of a dim-reduce pipeline stands for its stage 2 (the network the
pipeline made). The config is the run's own, as Hydra kept it (`.hydra/config.yaml`): the
network, data and transforms the weights were trained with; its `_target_`s are checked as
names before anything is imported for them (config.targets).

A run whose dir is not on this disk (another machine's, or one cleaned up) is fetched from the
store's artifacts into `<cwd>/.sporeflow/runs/<run id>/` (StoreReads.fetched: every file's SHA-256 must
be the one its run tagged), with the config the run logged; that config's model and dataset
must equal the params the run recorded, so an artifact store written by someone else cannot
choose the network or its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sporeflow.config.targets import stored_config_problem
from sporeflow.core.errors import CheckpointError, ConfigError
from sporeflow.core.names import RUN_DIR_TAG, StageKind
from sporeflow.storage.checkpoints import final_weights, is_checkpoint, load_checkpoint_file
from sporeflow.tracking.store import flatten
from sporeflow.tracking.store_reads import (
    StoreReads,
    marked_run_id,
    names_a_model_version,
    names_a_run,
)

HYDRA_CONFIG = Path(".hydra") / "config.yaml"
LOGGED_CONFIG = "config/config.yaml"  # job.runs.record_config
CHECKED_NODES = ("model", "dataset")  # what builds the network and its input


@dataclass(frozen=True)
class Source:
    """Where a run's final weights are, the config they were trained with, and what to call
    the source in records (the name the user gave, and its MLflow run id when known)."""

    name: str
    weights: Path
    config: DictConfig | None  # None: a checkpoint file outside any run dir
    run_id: str | None = None


def resolve(name: str, reads: StoreReads, key: str = "source") -> Source:
    """The source `name` (a run or stage dir, an MLflow run id or a `models:/` URI);
    ConfigError naming `key` when it is none of them, has no final weights, or its files are
    neither on this disk nor in the store as the run made them."""
    path = Path(name).expanduser()
    in_store = names_a_run(name) or names_a_model_version(name)
    try:
        if path.is_dir():
            return _from_dir(name, path.resolve(), None)
        if path.is_file() and is_checkpoint(path):
            return _from_checkpoint(name, path.resolve())
        if in_store:
            return _from_run(name, reads)
    except ConfigError as ex:
        raise ConfigError(f"{key}={ex}") from None
    looks_like_a_path = name.startswith((".", "~")) or "/" in name
    if looks_like_a_path and not in_store and not path.exists():
        raise ConfigError(f"{key}={name}: no such file or folder ({path.absolute()})")
    raise ConfigError(
        f"{key}={name}: not a run dir, a stage dir, a .ckpt or .safetensors file, an MLflow "
        "run id (or the sf-... key in a run dir's sporeflow_run.json), or "
        "models:/<name>/<version> "
        "(a run dir is where train.py ran: outputs/<date>/<time>_<id>, or multirun/<...>/<job>)"
    )


def _from_checkpoint(name: str, path: Path) -> Source:
    """A checkpoint file: readable, with the config of the run dir it lies in (up to
    `<run dir>/<stage>/checkpoints/rank_<r>/`), if any."""
    try:
        load_checkpoint_file(path)
    except CheckpointError as ex:
        raise ConfigError(f"{name}: {ex}") from None
    run_dir = next((p for p in path.parents[:4] if (p / HYDRA_CONFIG).is_file()), None)
    config = stored_config(name, run_dir / HYDRA_CONFIG) if run_dir else None
    return Source(name, path, config, None)


def _from_run(name: str, reads: StoreReads) -> Source:
    """A run the store has (a dim-reduce pipeline's: its stage 2), from its dir on this disk,
    else from its artifacts."""
    run, problem = reads.run_named(name)
    if run is None:
        raise ConfigError(f"{name}: {problem}")
    run_dir = run.data.tags.get(RUN_DIR_TAG)
    if run_dir and Path(run_dir).is_dir():
        return _from_dir(name, Path(run_dir), run.info.run_id)
    return _fetched(name, run, reads)


def _fetched(name: str, run, reads: StoreReads) -> Source:
    """A run whose dir is not on this disk, from the store's artifacts, checked (module doc)."""
    run_id = run.info.run_id
    folder, problem = reads.fetched(run, Path.cwd())
    if folder is None:
        raise ConfigError(
            f"{name}: run {run_id}'s dir is not on this machine, and in {reads.uri} {problem}"
        )
    config_file = folder / LOGGED_CONFIG
    if not config_file.is_file() and not reads.download(run_id, ["config"], folder):
        raise ConfigError(f"{name}: run {run_id} logged no {LOGGED_CONFIG} in {reads.uri}")
    weights = final_weights(folder)
    config = stored_config(name, config_file)
    differs = _differs_from_params(config, run.data.params)
    if differs:
        raise ConfigError(
            f"{name}: the {LOGGED_CONFIG} fetched from {reads.uri} is not the config run "
            f"{run_id} recorded ({differs}); not used"
        )
    if not weights.is_file():
        raise ConfigError(f"{name}: run {run_id} logged no final weights in {reads.uri}")
    return Source(name, weights, config, run_id)


def _differs_from_params(config: DictConfig, params: dict[str, str]) -> str | None:
    """The first key of the model and dataset nodes whose value is not the run's param."""
    container = OmegaConf.to_container(config, resolve=True, enum_to_str=True)
    assert isinstance(container, dict)
    flat = flatten({node: container.get(node) for node in CHECKED_NODES})
    for key, value in sorted(flat.items()):
        if params.get(key) != str(value):
            return f"{key}={value}, recorded {params.get(key)}"
    return None


def stored_config(name: str, file: Path) -> DictConfig:
    """The stored config `file` of source `name`, once every `_target_` in it names a module
    that may be imported (config.targets.stored_config_problem: decided before anything is
    imported for it, so a run dir's config naming `this.LeNet5` runs nothing); ConfigError
    naming the source, the key and the file."""
    config = OmegaConf.load(file)
    if not isinstance(config, DictConfig):
        raise ConfigError(f"{name}: {file} is not a config (a mapping of keys)")
    problem = stored_config_problem(OmegaConf.to_container(config, resolve=False), file)
    if problem:
        raise ConfigError(f"{name}: {problem}")
    return config


def _from_dir(name: str, path: Path, run_id: str | None) -> Source:
    run_dir = next((p for p in (path, path.parent) if (p / HYDRA_CONFIG).is_file()), None)
    if run_dir is None:
        raise ConfigError(f"{name}: {path} holds no {HYDRA_CONFIG} (not a run dir)")
    config = stored_config(name, run_dir / HYDRA_CONFIG)
    stage_dir = path
    if path == run_dir and OmegaConf.select(config, "boost.name") == "dim_reduce":
        stage_dir = run_dir / StageKind.stage2  # the network the pipeline made
    weights = final_weights(stage_dir)
    if not weights.is_file():
        raise ConfigError(f"{name}: no final weights at {weights} (the run did not finish?)")
    return Source(name, weights, config, run_id or marked_run_id(stage_dir, run_dir))
