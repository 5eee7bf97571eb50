"""The two runs of `sporeflow compare RUN_A RUN_B` (and `sporeflow.compare(a, b)`) read as the
comparison needs them (report.run_pair.Side): found as eval.py's `source=` finds a run
(stage.source.resolve: a run or stage dir, an MLflow run id or sf- key, a `models:/` URI; a
pipeline stands for its stage 2), then what the run kept - right/wrong per test image
(test_predictions.npy beside its final weights, checked by its SHA-256 when fetched from the
store) - and what its MLflow run recorded: the test data set's name and digest (what tells two
test splits apart), its `cost/*` metrics. Nothing is trained or evaluated."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf

from sporeflow.core.errors import ConfigError
from sporeflow.core.names import PARENT_RUN_TAG, TEST_PREDICTIONS
from sporeflow.engine.cost import PREFIX as COST_PREFIX
from sporeflow.report.run_pair import RunPair, Side, paired
from sporeflow.stage.source import HYDRA_CONFIG, Source, resolve
from sporeflow.storage.checkpoints import is_checkpoint
from sporeflow.storage.run_marker import read_run_marker
from sporeflow.tracking.datasets import CONTEXT_TAG
from sporeflow.tracking.store import flatten
from sporeflow.tracking.store_reads import StoreReads

KEYS = ("RUN_A", "RUN_B")  # how a refusal names each run: the command's arguments
TESTED = "evaluation"  # the context of the test split's dataset input (stage.outputs)


def compared(a: str, b: str, reads: StoreReads) -> RunPair:
    """Run `a` against run `b` on the test images both were tested on; ConfigError (one line,
    naming RUN_A or RUN_B) when either is not a finished run with its per-image test outcomes
    and a recorded test data set, or when their test images differ."""
    return paired(side(a, reads, KEYS[0]), side(b, reads, KEYS[1]))


def side(name: str, reads: StoreReads, key: str) -> Side:
    """One run as the comparison reads it (report.run_pair.Side)."""
    if Path(name).expanduser().is_file() and is_checkpoint(Path(name).expanduser()):
        raise ConfigError(
            f"{key}={name}: a checkpoint holds weights, not the run's per-image test outcomes; "
            "give its run dir, run id or models:/ URI"
        )
    source = resolve(name, reads, key)
    run, store = recorded_run(source, reads)
    if run is None:
        raise ConfigError(
            f"{key}={name}: no MLflow run of it in {reads.uri} or its run dir's store "
            "(tracking.enabled=false?), so which test images it saw is not known"
        )
    return Side(
        name=name,
        run_id=run.info.run_id,
        correct=test_outcomes(source, key),
        test_data=test_data(run, store, key, name),
        config=flat_config(source.config),
        cost={k: float(v) for k, v in run.data.metrics.items() if k.startswith(COST_PREFIX)},
    )


def test_outcomes(source: Source, key: str) -> np.ndarray:
    """Right/wrong per test image of the weights `source` names: the test_predictions.npy of
    the stage dir they lie in (`<stage dir>/checkpoints[/rank_<r>]/final.ckpt`)."""
    for folder in source.weights.parents[:3]:
        if (folder / TEST_PREDICTIONS).is_file():
            return np.load(folder / TEST_PREDICTIONS, allow_pickle=False).astype(bool)
    raise ConfigError(
        f"{key}={source.name}: no {TEST_PREDICTIONS} beside its final weights "
        f"{source.weights} (a run recorded before sporeflow kept its per-image test outcomes)"
    )


def recorded_run(source: Source, reads: StoreReads) -> tuple[Any, StoreReads]:
    """(the MLflow run that made `source`'s weights, the store it is in): from the store its
    run dir's marker names (where it was recorded), else from `reads`; (None, reads) when
    neither has it."""
    if source.run_id is not None:
        marked = _marked_store(source, reads)
        for store in (reads,) if marked is None else (marked, reads):
            run = store.get_run(source.run_id)
            if run is not None:
                return run, store
    return None, reads


def _marked_store(source: Source, reads: StoreReads) -> StoreReads | None:
    """The store the run dir of `source`'s weights was recorded in (its marker's
    `tracking_uri`), in the experiment its config names; None outside a run dir."""
    run_dir = next((p for p in source.weights.parents[:4] if (p / HYDRA_CONFIG).is_file()), None)
    uri = read_run_marker(run_dir).get("tracking_uri") if run_dir is not None else None
    if not isinstance(uri, str) or not uri or source.config is None:
        return None
    experiment = OmegaConf.select(source.config, "tracking.experiment_name", default=None)
    return StoreReads(uri, str(experiment or reads.experiment_name))


def test_data(run: Any, store: StoreReads, key: str, name: str) -> str:
    """`<name> <digest>` of the test split `run` recorded as its `evaluation` input (a stage
    run of a pipeline: its parent's, where the stage recorded none)."""
    for found in (run, _parent(run, store)):
        for given in found.inputs.dataset_inputs if found is not None else []:
            if any(t.key == CONTEXT_TAG and t.value == TESTED for t in given.tags):
                return f"{given.dataset.name} {given.dataset.digest}"
    raise ConfigError(
        f"{key}={name}: its MLflow run {run.info.run_id} records no test data set (an "
        f"`{TESTED}` input), so which test images it saw is not known"
    )


def _parent(run: Any, store: StoreReads) -> Any:
    parent = run.data.tags.get(PARENT_RUN_TAG)
    return store.get_run(parent) if parent else None


def flat_config(config: DictConfig | None) -> dict[str, str]:
    """The composed config a run kept, flattened as its MLflow params are (`optimizer.lr`),
    resolved where its interpolations resolve here, else as written."""
    if config is None:
        return {}
    try:
        tree = OmegaConf.to_container(config, resolve=True, enum_to_str=True)
    except Exception:  # noqa: BLE001 - a resolver of the run's own (oc.env of its machine)
        tree = OmegaConf.to_container(config, resolve=False, enum_to_str=True)
    assert isinstance(tree, dict)
    return flatten({str(k): v for k, v in tree.items()}, limit=None)
