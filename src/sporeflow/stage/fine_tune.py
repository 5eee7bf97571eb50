"""Fine-tuning (`train.init_from`, `train.freeze`): a run that starts from another run's final
weights where names and shapes match, with the parameters under some prefixes kept fixed.

The source is named as for eval.py (stage.source). What does not fit (a classifier for another
`num_classes`) stays as initialised and is named in one log line; a source of which nothing
fits, or a freeze prefix that matches no parameter, is refused before any work (preflight)."""

from __future__ import annotations

import logging
from pathlib import Path

from sporeflow.config.schema import RunConfig, TrainStepConfig
from sporeflow.core.errors import ConfigError
from sporeflow.core.names import INIT_FROM_RUN_TAG, INIT_FROM_TAG, INIT_WEIGHTS_TAG
from sporeflow.stage.source import Source, resolve
from sporeflow.stage.spec import FineTuneStart
from sporeflow.storage.checkpoints import load_checkpoint_file, matching, restore_matching
from sporeflow.tracking.store_reads import StoreReads

log = logging.getLogger(__name__)
KEY = "train.init_from"


def init_source(train: TrainStepConfig, reads: StoreReads) -> Source | None:
    """The run `train.init_from` names (None when unset); ConfigError naming the key."""
    if not train.init_from:
        return None
    return resolve(str(train.init_from), reads, key=KEY)


def start_of(train: TrainStepConfig, reads: StoreReads) -> FineTuneStart | None:
    """What a first stage's spec needs of train.init_from (None when unset): the weights, and
    tags naming the source (its MLflow run id when known) on the stage's run."""
    source = init_source(train, reads)
    if source is None:
        return None
    tags = {INIT_FROM_TAG: source.name, INIT_WEIGHTS_TAG: str(source.weights)}
    if source.run_id:
        tags[INIT_FROM_RUN_TAG] = source.run_id
    return FineTuneStart(source.weights, tags)


def start_from(network, weights: Path) -> list[str]:
    """Load what fits from `weights` into `network` and say what did not; returns those names."""
    loaded, skipped = restore_matching(load_checkpoint_file(weights), network)
    left = (
        f"; left as initialised (not in it, or another shape): {', '.join(skipped)}"
        if skipped
        else ""
    )
    log.info(
        "%s: %d of %d parameters loaded from %s%s",
        KEY,
        len(loaded),
        len(loaded) + len(skipped),
        weights,
        left,
    )
    return skipped


def freeze(network, prefixes) -> list[str]:
    """Keep the parameters under `prefixes` fixed (out of `trainable_params`); their names."""
    frozen = [p for p in network.get_parameters() if _under(p.name, prefixes)]
    for param in frozen:
        param.requires_grad = False
    if frozen:
        log.info(
            "train.freeze: %d parameters kept fixed: %s",
            len(frozen),
            ", ".join(p.name for p in frozen),
        )
    return [p.name for p in frozen]


def check(run: RunConfig, network, source: Source | None) -> None:
    """Before any work: the source has weights that fit `network`, every freeze prefix matches
    a parameter and something is left to train. ConfigError naming the key."""
    names = [p.name for p in network.get_parameters()]
    if source is not None:
        loaded, _ = matching(load_checkpoint_file(source.weights), network)
        if not loaded:
            raise ConfigError(
                f"{KEY}={source.name}: none of its weights ({source.weights}) fits "
                f"model={run.model['_target_']} (other names or shapes): another network?"
            )
    prefixes = list(run.train.freeze)
    unmatched = [p for p in prefixes if not any(_under(n, [p]) for n in names)]
    if unmatched:
        tops = sorted({n.split(".")[0] for n in names})
        raise ConfigError(
            f"train.freeze: {', '.join(unmatched)} matches no parameter of "
            f"{type(network).__name__}; its parameters start with: {', '.join(tops)}"
        )
    if prefixes and all(_under(n, prefixes) for n in names):
        raise ConfigError(f"train.freeze={prefixes} keeps every parameter fixed: nothing to train")


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p.rstrip(".") + ".") for p in prefixes)
