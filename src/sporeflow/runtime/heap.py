"""Python's cyclic garbage collector kept off the objects a job starts with.

MindSpore runs a full `gc.collect()` before it compiles each graph (`mindspore/graph/api.py`,
`_CellGraphExecutor.compile`): a job compiles several graphs (train and eval steps of every
stage, the MINDIR export), and with MLflow, Optuna and pandas loaded in a sweep's process
each full collection walks about half a million objects. The objects alive when a job starts
(modules, the config, a sweep's state) outlive it, so they are moved to the collector's
permanent generation for the job's duration (`gc.freeze`): each collection then walks only what
the job made. Afterwards they go back (`gc.unfreeze`), so a later job's garbage is freed as
before.

The jobs of a sweep that share a process (Hydra's basic launcher, a joblib worker) keep them
frozen from one job to the next (`keep=True`): the next job's start collects only what is not
frozen yet (about 0.3 s a job saved in the README sweep) and freezes what survived. Cyclic
garbage among frozen objects (a finished job's config) waits for the next full collection,
made once the frozen objects have grown by a quarter since the last one, and at the sweep's
end (`release`). BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

GROWTH = 1.25  # frozen objects may grow this much between two full collections
_AFTER_FULL = {"frozen": 0}  # how many objects the last full collection left frozen


@contextmanager
def long_lived_objects_frozen(keep: bool = False) -> Iterator[None]:
    """Collect, freeze what is left for the block; unfreeze after it unless `keep`."""
    frozen = gc.get_freeze_count()
    full = not frozen or frozen > GROWTH * _AFTER_FULL["frozen"]
    if full:
        gc.unfreeze()  # what was frozen may have become garbage: collect everything
    gc.collect()  # else only what the last job left unfrozen
    gc.freeze()
    if full:
        _AFTER_FULL["frozen"] = gc.get_freeze_count()
    try:
        yield
    finally:
        if not keep:
            release()


def release() -> None:
    """Give the frozen objects back to the collector (a sweep's end)."""
    gc.unfreeze()
