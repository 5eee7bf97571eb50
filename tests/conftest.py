"""Fixtures only (what tests import lives in tests/helpers): Hydra compose against the real
conf/ and a small IDX data set."""

from __future__ import annotations

import logging
import os

import pytest

from helpers import ordering
from helpers.formats import write_idx
from sporeflow.runtime import cpu_isa

# In-process MindSpore (the unit tests) gets the CPU ISA the product itself chooses with
# runtime.cpu_isa=auto, before anything imports MindSpore. Subprocesses of train.py do not
# inherit it (helpers.train drops it), so they exercise `auto` themselves.
INHERITED_ISA = os.environ.get(cpu_isa.ENV_VAR)
cpu_isa.apply("auto")


def _device_before_any_kernel() -> None:
    """MindSpore takes its device once, before any kernel runs (as runtime.init_context does in
    a job's process); a test that runs a kernel first would make every later in-process job's
    set_device fail, so the whole session takes the CPU here, first."""
    import mindspore as ms

    ms.set_device("CPU")


_device_before_any_kernel()


def pytest_configure(config):
    ordering.install(config)


def pytest_collection_modifyitems(config, items):
    items[:] = ordering.longest_first(items)


@pytest.fixture(autouse=True)
def _hydra_version_base_unset():
    """`initialize(version_base="1.3")` sets a process-wide default (whether a job changes into
    its output dir, among others) that outlives the call; make test-all runs files of both tiers
    in one process, so every test starts with the base a fresh process has (Hydra's own launcher
    suites expect it). Reset at setup too: a module-scoped fixture composes before this runs."""
    from hydra.version import _UNSPECIFIED_, VersionBase

    base = VersionBase.instance()
    base.version_base = _UNSPECIFIED_
    yield
    base.version_base = _UNSPECIFIED_


@pytest.fixture(autouse=True)
def _no_log_handler_on_a_closed_stream():
    """A logging handler made while an earlier test had stderr swapped (capsys, an in-process
    command's redirect) keeps that stream after it was closed, and the next record through it
    prints "--- Logging error ---" into a later test's stderr (test_eval's one-line predict
    refusal met one). Such handlers are dropped before each test: a real process never swaps
    its stderr, so only the tests' own process can leave them."""
    loggers = [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]
    for logger in loggers:
        for handler in list(getattr(logger, "handlers", [])):
            if getattr(getattr(handler, "stream", None), "closed", False):
                logger.removeHandler(handler)
    yield


@pytest.fixture
def compose_cfg():
    """compose_cfg(["optimizer=sgd", ...]) -> the composed DictConfig, as train.py would see it
    (sporeflow.compose, unvalidated: the tests validate what they need)."""
    from sporeflow.entry.python_api import compose

    return lambda overrides=(): compose(overrides, validate=False)


@pytest.fixture
def idx_dir(tmp_path):
    """A small gzipped IDX data set: class k images are bright in band k (learnable, not random)."""
    import numpy as np

    rng = np.random.default_rng(0)

    def make(n):
        labels = rng.integers(0, 10, n)
        images = rng.integers(0, 40, (n, 28, 28))
        for i, k in enumerate(labels):
            images[i, 2 * k + 4 : 2 * k + 6, :] = 250
        return images, labels

    root = tmp_path / "idx"
    write_idx(root, "train", *make(256))
    write_idx(root, "test", *make(64))
    return root
