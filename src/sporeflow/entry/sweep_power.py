"""What a sweep's data can decide, said once before its first job (report.power): the smallest
difference in accuracy between two of its points that its validation images x seeds resolve,
and what more seeds or a larger `dataset.val_split` would resolve.

Read from what the sweep's check (entry.sweep_check) has composed and counted already: the
sweep's points as its sweeper will launch them, the first point's config, and its data set's
split sizes (a stored split's size, or the held-out count: no image is read through MindSpore).
Said only where the sweep decides between points on per-image outcomes: two or more points,
an objective that is not a loss.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf

from sporeflow.config import objective
from sporeflow.core.errors import DataError
from sporeflow.report.power import Option, power_line

log = logging.getLogger(__name__)
SEED_KEY = "seed"
MORE_SEEDS = 3  # the seeds option: this many times the sweep's seeds
LARGEST_SPLIT = 0.5  # a doubled val_split fraction is said up to this


def say_power(config: DictConfig) -> None:
    """Print the sweep's power line to stderr (nothing where it decides nothing). Never
    raises: a statement must not stop a sweep the check accepted."""
    try:
        line = sweep_power_line(config)
    except Exception as ex:  # noqa: BLE001 - the jobs still run and check themselves
        log.debug("no power statement for the sweep: %s", ex)
        return
    if line:
        print(line, file=sys.stderr)


def sweep_power_line(config: DictConfig) -> str | None:
    """The line for the sweep `config` (what Hydra hands on_multirun_start); None when its
    points are not compared on per-image outcomes."""
    from sporeflow.config.components import build_dataset
    from sporeflow.entry.sweep_check import Points, sweep_points

    if objective.primary(config.sweep.objective).endswith("loss"):
        return None  # a loss has no per-image outcome to pair: no tie test is made
    arguments = [str(a) for a in OmegaConf.to_container(config.hydra.overrides.task)]
    points, kind = sweep_points(config, arguments)
    if len({_without_seed(p) for p in points}) < 2:
        return None
    seeds = max(1, len({_seed(o) for p in points for o in p if _seed(o) is not None}))
    first = Points(config, points, kind).composed(0, list(points[0]))
    dataset = build_dataset(first)
    images = dataset.num_rows("val")
    held_out = dataset.selection_split == "val" and "val" not in dataset.stored_splits()
    options = [Option(f"{MORE_SEEDS * seeds} seeds", images, MORE_SEEDS * seeds)]
    larger = _larger_split(dataset.val_split) if held_out else None
    if larger is not None:
        try:
            more = build_dataset(first, val_split=larger).num_rows("val")
            options.append(Option(f"dataset.val_split={larger:g} ({more} images)", more, seeds))
        except DataError:  # the training split cannot give that many: said without it
            pass
    split = "validation" if dataset.selection_split == "val" else "test"
    return power_line(images, seeds, split, options)


def _larger_split(val_split: float) -> float | None:
    """Twice `val_split` (a fraction up to LARGEST_SPLIT, or a count); None where it cannot
    grow."""
    if val_split >= 1:
        return float(2 * int(val_split))
    doubled = min(LARGEST_SPLIT, 2 * float(val_split))
    return round(doubled, 6) if doubled > val_split else None


def _seed(override: str) -> str | None:
    """The value of a `seed=` override (also `+seed=`, `++seed=`); None for any other key."""
    key, _, value = override.partition("=")
    return value if key.lstrip("+") == SEED_KEY else None


def _without_seed(point: Sequence[str]) -> tuple[str, ...]:
    """A point's overrides without its seed: what the decision calls a point."""
    return tuple(o for o in point if _seed(o) is None)
