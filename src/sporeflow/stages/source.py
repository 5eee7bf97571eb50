"""A finished run as the start of the next experiment: where its weights and its config are.

`source=` names a run dir (`outputs/<date>/<time>_<id>`), one of its stage dirs (`.../stage2`)
or an MLflow run id whose run dir is on this disk. A run dir of a dim-reduce pipeline stands
for its stage 2 (the network the pipeline made). The config is the run's own, as Hydra kept it
(`.hydra/config.yaml`): the network, data and transforms the weights were trained with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from sporeflow.core.errors import ConfigError
from sporeflow.storage.checkpoints import final_weights
from sporeflow.storage.run_marker import read_run_marker
from sporeflow.tracking.journal import AppliedState
from sporeflow.tracking.tracker import Tracker

RUN_ID = re.compile(r"^[0-9a-f]{32}$")  # an MLflow run id
HYDRA_CONFIG = Path(".hydra") / "config.yaml"


@dataclass(frozen=True)
class Source:
    """Where a run's final weights are, the config they were trained with, and what to call
    the source in records (the name the user gave, and its MLflow run id when known)."""

    name: str
    weights: Path
    config: DictConfig
    run_id: str | None = None


def resolve(name: str, tracker: Tracker, key: str = "source") -> Source:
    """The source `name` (a run or stage dir, or an MLflow run id); ConfigError naming `key`
    when it is none of them, has no final weights, or its run dir is not on this disk."""
    path = Path(name).expanduser()
    try:
        if path.is_dir():
            return _from_dir(name, path.resolve(), None)
        if RUN_ID.match(name):
            return _from_run_id(name, tracker)
    except ConfigError as ex:
        raise ConfigError(f"{key}={ex}") from None
    raise ConfigError(
        f"{key}={name}: not a run dir, a stage dir or an MLflow run id (a run dir is where "
        "train.py ran: outputs/<date>/<time>_<id>, or multirun/<...>/<job>)"
    )


def _from_run_id(run_id: str, tracker: Tracker) -> Source:
    run = tracker.get_run(run_id)
    if run is None:
        raise ConfigError(f"{run_id}: no such MLflow run in {tracker.uri}")
    run_dir = Path(run.data.tags.get("run_dir", ""))
    if not run_dir.is_dir():
        raise ConfigError(
            f"{run_id}: its run dir {run_dir} is not on this machine; give the run dir"
        )
    return _from_dir(run_id, run_dir, run_id)


def _from_dir(name: str, path: Path, run_id: str | None) -> Source:
    run_dir = next((p for p in (path, path.parent) if (p / HYDRA_CONFIG).is_file()), None)
    if run_dir is None:
        raise ConfigError(f"{name}: {path} holds no {HYDRA_CONFIG} (not a run dir)")
    config = OmegaConf.load(run_dir / HYDRA_CONFIG)
    assert isinstance(config, DictConfig)
    stage_dir = path
    if path == run_dir and OmegaConf.select(config, "boost.name") == "dim_reduce":
        stage_dir = run_dir / "stage2"  # the network the pipeline made
    weights = final_weights(stage_dir)
    if not weights.is_file():
        raise ConfigError(f"{name}: no final weights at {weights} (the run did not finish?)")
    return Source(name, weights, config, run_id or _marked_run_id(stage_dir, run_dir))


def _marked_run_id(stage_dir: Path, run_dir: Path) -> str | None:
    """The MLflow run id of the run that made `stage_dir` (or its job's run), from the run
    marker: a journal key there is looked up in what the run's writer applied."""
    key = (read_run_marker(stage_dir) or read_run_marker(run_dir)).get("mlflow_run_id")
    if not isinstance(key, str) or RUN_ID.match(key):
        return key if isinstance(key, str) else None
    journals = sorted((run_dir / "tracking").glob("*.jsonl"))
    found = (AppliedState.load(journal).runs.get(key) for journal in journals)
    return next((run_id for run_id in found if run_id), None)
