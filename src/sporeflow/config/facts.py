"""Facts derived from a run's config, each derived in this one place: whether the run is a
dim-reduce pipeline, and the batch one worker feeds versus the job's global batch. Every
layer above reads them here instead of comparing enums or redoing the arithmetic."""

from __future__ import annotations

from typing import Any

from omegaconf import OmegaConf

from sporeflow.config import objective
from sporeflow.config.schema import BoostName


def is_dim_reduce(cfg: Any) -> bool:
    """Whether `boost` asks for the dim-reduce pipeline. Takes a validated config (an enum)
    or a composed one still holding the option's name (the Optuna sweeper's view)."""
    return BoostName.names_dim_reduce(getattr(getattr(cfg, "boost", None), "name", None))


def container(cfg: Any) -> dict[str, Any]:
    """A config node as plain dicts and lists, interpolations resolved and enums by name:
    what records, digests and a packaged model take."""
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    assert isinstance(plain, dict), "a config node, not a list"
    return plain  # type: ignore[return-value]  # DictConfig keys are str in sporeflow's configs


def checkpoint_format(cfg: Any) -> str:
    """The suffix (and MindSpore `format=`) of the checkpoints a run writes; `ckpt` for a
    config logged before the option existed (a source evaluated or fine-tuned from)."""
    fmt = OmegaConf.select(cfg, "callbacks.checkpoint.format", default="ckpt")
    return str(getattr(fmt, "value", fmt))


def worker_batch_size(cfg: Any) -> int:
    """The batch one worker feeds per step. `dataset.batch_size` is the global batch, split
    evenly across `parallel.workers`, so adding parallel=dataN runs the same updates where the
    training split divides by the global batch (docs/parallel.md says where it does not);
    `parallel.per_worker_batch=true` makes it per worker instead (the seeds' recipes)."""
    if cfg.parallel.per_worker_batch:
        return cfg.dataset.batch_size
    return cfg.dataset.batch_size // cfg.parallel.workers


def first_local_rank(cfg: Any) -> int:
    """The rank of this node's first worker (msrun numbers ranks node by node)."""
    par = cfg.parallel
    return int(par.node_rank * (par.workers // par.nodes))


def global_batch_size(cfg: Any) -> int:
    return worker_batch_size(cfg) * cfg.parallel.workers


def reuse_off_reason(cfg: Any) -> str | None:
    """Why a dim-reduce job asked to reuse finished stages cannot (None: it can, or did not
    ask): reuse finds them in the MLflow store, and `tracking.enabled=false` has none. Of a
    validated config or its typed twin (job.plan's `plan.run`)."""
    if not is_dim_reduce(cfg) or cfg.tracking.enabled:
        return None
    asked = [k for k in ("reuse_stage1", "reuse_baselines") if getattr(cfg.boost, k)]
    if not asked:
        return None
    return (
        "reuse is off: tracking.enabled=false, and finished stages are found in the MLflow "
        "store; stage 1 and the baselines are trained in this job "
        f"({', '.join(f'boost.{k}' for k in asked)} need tracking on)"
    )


def sweep_direction(cfg: Any) -> str:
    """`maximize` or `minimize`: how a sweeper ranks a sporeflow app's jobs, from its
    `sweep.objective` (a loss is minimised); `minimize` for any other Hydra app (Optuna's own
    default)."""
    chosen = OmegaConf.select(cfg, "sweep.objective", default=None)
    if chosen is None:
        return "minimize"
    explicit = objective.name(objective.primary(chosen), is_dim_reduce(cfg))
    return "maximize" if objective.maximize(explicit) else "minimize"


def sweep_directions(cfg: Any, direction: Any) -> list[str]:
    """An Optuna study's directions: `hydra.sweeper.direction` as a list (one word: a list of
    one; null: `sweep_direction`). A list of several, for a sporeflow app, is checked against its
    `sweep.objective` list (objective.direction_refusal): ConfigError otherwise."""
    from sporeflow.core.errors import ConfigError

    if direction is None:
        return [sweep_direction(cfg)]
    if isinstance(direction, str):
        return [direction]
    given = [str(d) for d in direction]
    chosen = OmegaConf.select(cfg, "sweep.objective", default=None)
    if len(given) > 1 and chosen is not None:
        found = objective.parts(chosen)
        explicit = [objective.name(o, is_dim_reduce(cfg)) for o in found]
        problem = objective.direction_refusal(explicit, given)
        if problem:
            raise ConfigError(problem)
    return given
