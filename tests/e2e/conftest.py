"""Expensive runs that several end-to-end tests read, each started once per session (a test
that changes what it reads works on its own copy)."""

from __future__ import annotations

import mindspore as ms
import pytest

from helpers.train import COMBINED_BATCH, ODD_FOLDER, RHO_SWEEP, multirun, run_train


@pytest.fixture(scope="session")
def standalone_on_the_combined_batch(tmp_path_factory) -> dict:
    """Final weights (name -> numpy array) of `python train.py COMBINED_BATCH`."""
    launch = tmp_path_factory.mktemp("standalone_reference")
    proc = run_train(COMBINED_BATCH, launch)
    assert proc.returncode == 0, proc.stderr[-3000:]
    ckpt = ms.load_checkpoint(str(launch / "run" / "checkpoints" / "final.ckpt"))
    return {k: v.asnumpy() for k, v in ckpt.items()}


@pytest.fixture(scope="session")
def rho_sweep(tmp_path_factory):
    """`python train.py -m RHO_SWEEP`: (the launch dir after the sweep, the finished process)."""
    cwd = tmp_path_factory.mktemp("rho_sweep") / ODD_FOLDER
    cwd.mkdir()
    proc = multirun(cwd, *RHO_SWEEP)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return cwd, proc


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL server on 127.0.0.1 for the session (helpers.postgres), torn down after."""
    from helpers import postgres as pg

    reason = pg.unavailable()
    if reason:
        pytest.skip(reason)
    server = pg.PostgresServer().start()
    yield server
    server.stop()
