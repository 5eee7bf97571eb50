"""`python eval.py source=<run dir | stage dir | MLflow run id> [split=test|val|train] [key=value]`:
a finished run's final weights evaluated again, as their own MLflow run (stage `eval`).

The config is the source's own (network, data, transforms: stage.source); keys given on the
command line replace the source's (`dataset=fashion_mnist`, `dataset.batch_size=64`). Where it
records (`tracking`), how many processes (`parallel`: one) and this machine's kernels
(`runtime`) are the eval's own.
"""

from __future__ import annotations

import sys

from omegaconf import DictConfig, OmegaConf

from sporeflow.config.components import build_dataset
from sporeflow.config.paths import from_launch_dir
from sporeflow.config.schema import EVAL_KEYS, Split
from sporeflow.config.validation import validate
from sporeflow.core import signals
from sporeflow.core.names import SOURCE_RUN_TAG, SOURCE_TAG, SOURCE_WEIGHTS_TAG
from sporeflow.engine import compile_cache
from sporeflow.entry import messages
from sporeflow.entry.app import remove_unused_run_dir, run_context
from sporeflow.job.eval_run import (
    evaluate_source,
    labelled_by_model,
    loaded_network,
    model_class_names,
)
from sporeflow.job.preflight import check_compile_cache, check_writes
from sporeflow.job.runs import base_name, guarded, record_config
from sporeflow.runtime.heap import long_lived_objects_frozen
from sporeflow.runtime.mindspore_context import init_context, refuse_compile_cache
from sporeflow.stage.source import Source, resolve
from sporeflow.tracking.store_reads import StoreReads
from sporeflow.tracking.tracker import Tracker

OWN_NODES = ("tracking", "parallel", "runtime")


def run_eval(cfg: DictConfig) -> float:
    """Resolve and check before any work (exit 2 on bad input), then evaluate; returns the
    top-1 accuracy."""
    ctx = run_context()
    cfg = from_launch_dir(cfg, ctx.launch_dir)  # relative paths: the launch folder's
    signals.exit_at_once(lambda: remove_unused_run_dir(ctx.run_dir))
    lookup = StoreReads.of_config(cfg.tracking, ctx.launch_dir)
    try:
        source = resolve(str(cfg.source), lookup)
        base = source.config
        if (
            base is None
        ):  # a checkpoint outside a run dir: the network and data of eval's own config
            base = OmegaConf.masked_copy(cfg, [k for k in cfg if k not in EVAL_KEYS])
        plain = validate(over_source(base, cfg, ctx.overrides))
        split = Split(cfg.split).value
        dataset = build_dataset(plain)
        names = model_class_names(source, dataset)
        labelled_by_model(dataset, names).check((split,))  # a folder unknown to it: refused
        refuse_compile_cache()
        check_compile_cache(plain.runtime)
        check_writes("hydra.run.dir", [ctx.run_dir], plain.tracking, ctx.launch_dir)
        init_context(plain)
        network = loaded_network(plain, source)
    except messages.usage_errors():
        remove_unused_run_dir(ctx.run_dir)
        raise
    signals.install()
    tracker = Tracker.from_config(plain.tracking, ctx.launch_dir, journal_dir=ctx.run_dir)
    with compile_cache.cached(plain.runtime), tracker, long_lived_objects_frozen():
        run = tracker.start_run(f"eval {base_name(plain)}", tags=source_tags(source, split))
        record_config(run, plain, ctx, "eval")
        metrics = guarded(
            run,
            lambda: evaluate_source(plain, network, split, ctx.run_dir, run, dataset, names),
        )
        shown = ", ".join(
            f"{k}={metrics[k]:.4f}" for k in ("acc", "acc_top5", "loss") if k in metrics
        )
        print(
            f"[sporeflow] eval of {source.name} on its {split} split: {shown}; "
            f"files in {ctx.run_dir}; {tracker.describe()}",
            file=sys.stderr,
        )
    return metrics["acc"]


def source_tags(source: Source, split: str) -> dict[str, str]:
    """What links the eval run to what it evaluated."""
    tags = {SOURCE_TAG: source.name, SOURCE_WEIGHTS_TAG: str(source.weights)}
    if source.run_id:
        tags[SOURCE_RUN_TAG] = source.run_id
    return {**tags, "eval.split": split}


def over_source(source_config: DictConfig, cfg: DictConfig, overrides: list[str]) -> DictConfig:
    """The source's config with the eval's own nodes and every key the command line gave
    (a group option replaces the source's whole node)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    merged = OmegaConf.create(OmegaConf.to_container(source_config))
    for node in OWN_NODES:
        merged[node] = cfg[node]
    merged.resume = False
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if key.split(".")[0] in EVAL_KEYS or key.startswith("hydra") or override.is_delete():
            continue
        OmegaConf.update(merged, key, OmegaConf.select(cfg, key), merge=False)
    return merged
