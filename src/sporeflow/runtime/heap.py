"""Python's cyclic garbage collector kept off the objects a job starts with.

MindSpore runs a full `gc.collect()` before it compiles each graph (`mindspore/graph/api.py`,
`_CellGraphExecutor.compile`): a job compiles several graphs (train and eval steps of every
stage, the MINDIR export), and with MLflow, Optuna and pandas loaded in a sweep's process
each full collection walks about half a million objects. The objects alive when a job starts
(modules, the config, a sweep's state) outlive it, so they are moved to the collector's
permanent generation for the job's duration (`gc.freeze`): each collection then walks only what
the job made. Afterwards they go back (`gc.unfreeze`), so a later job's garbage is freed as
before. BENCHMARKS.md has the figures.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def long_lived_objects_frozen() -> Iterator[None]:
    """Collect once, freeze what is left for the block, unfreeze after it."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
