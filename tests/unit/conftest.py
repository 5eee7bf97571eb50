"""The in-process tier's one tracking writer per test process (helpers.inprocess says why)."""

from __future__ import annotations

import pytest

from helpers.inprocess import use_shared_writer
from sporeflow.tracking.shared_writer import SharedWriter, writer_file


@pytest.fixture(scope="session", autouse=True)
def _one_tracking_writer_for_the_jobs_run_here(tmp_path_factory):
    """Started before the first job, stopped after the last: the jobs run by
    helpers.inprocess register their journals with it and wait for their records."""
    writer = SharedWriter(tmp_path_factory.mktemp("tracking-writer"), 30.0, jobs_wait=True)
    use_shared_writer(writer_file(writer.home) if writer.start() else None)
    yield
    use_shared_writer(None)
    assert writer.stop() == 0, "the shared writer left records unsent (its log says why)"
