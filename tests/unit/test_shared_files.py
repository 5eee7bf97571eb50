"""Files one machine shares for reuse and another fetches (issue 35): every shared file carries
the SHA-256 its maker took, a fetched copy that differs is not used, and a snapshot manifest
cannot reach outside its folder. A real sqlite store and writer process; the "other machine"
is another launch dir fetching through the store's artifacts."""

from __future__ import annotations

import hashlib
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlparse

import numpy as np
import pytest

from sporeflow.job import reuse
from sporeflow.storage.files import sha256_file
from sporeflow.tracking import run_files
from sporeflow.tracking.run_files import checksum_tag
from sporeflow.tracking.tracker import Tracker


@pytest.fixture(scope="module")
def stage1(tmp_path_factory):
    """A finished stage-1 run that shared its weights, predictions and two snapshots, as a
    stage's process does: (tracker, the MLflow run, the dir it was made in). Tests that tamper
    with its stored files put them back."""
    root = tmp_path_factory.mktemp("maker")
    stage = root / "stage1"
    (stage / "checkpoints").mkdir(parents=True)
    (stage / "snapshots").mkdir()
    (stage / "checkpoints" / "final.ckpt").write_bytes(os.urandom(4096))
    np.save(stage / "predictions.npy", np.arange(10) % 2 == 0)
    for i in (1, 2):
        np.save(stage / "snapshots" / f"snap_{i}.npy", np.full(8, i, np.float32))
        os.utime(stage / "snapshots" / f"snap_{i}.npy", ns=(i * 10**18, i * 10**18))
    config = SimpleNamespace(uri=None, experiment_name="t", enabled=True)
    tracker = Tracker.from_config(config, root, journal_dir=stage / "tracking")
    with tracker:
        run = tracker.start_run("stage1", tags={"stage": "stage1"})
        run.log_artifact(stage / "checkpoints" / "final.ckpt", "checkpoints", checksum=True)
        reuse.share(run, stage, stage / "snapshots")
        run.end("FINISHED")
    return tracker, tracker.reads.get_run(tracker.applied().runs[run.run_id]), stage


@contextmanager
def tampered(run, name: str, data: bytes):
    """The artifact `name` of `run`, as the store keeps it (what a server serves), replaced by
    `data` (or added) while the block runs: what anyone who can write there could do."""
    path = Path(urlparse(run.info.artifact_uri).path) / name
    before = path.read_bytes() if path.is_file() else None
    path.write_bytes(data)
    try:
        yield
    finally:
        if before is None:
            path.unlink()
        else:
            path.write_bytes(before)


def test_a_shared_run_carries_the_sha256_its_maker_took_and_fetches_whole(stage1, tmp_path):
    tracker, run, made = stage1
    for name in ("checkpoints/final.ckpt", "predictions.npy", "snapshots/snap_1.npy"):
        expected = hashlib.sha256((made / name).read_bytes()).hexdigest()  # hashlib: reference
        assert run.data.tags[checksum_tag(name)] == expected == sha256_file(made / name)
    fetched = reuse.fetch(tracker.reads, run, tmp_path)
    assert fetched is not None
    for name in ("checkpoints/final.ckpt", "predictions.npy", "snapshots/snap_2.npy"):
        assert (fetched / name).read_bytes() == (made / name).read_bytes()
    assert (fetched / "snapshots" / "snap_2.npy").stat().st_mtime_ns == 2 * 10**18
    assert not (fetched / "snapshots" / run_files.MANIFEST).exists()


def test_weights_replaced_in_the_artifact_store_are_not_reused(stage1, tmp_path, caplog):
    tracker, run, _ = stage1
    with tampered(run, "checkpoints/final.ckpt", b"someone else's weights"):
        with caplog.at_level(logging.WARNING, logger="sporeflow.job.reuse"):
            assert reuse.fetch(tracker.reads, run, tmp_path) is None
    assert run.info.run_id in caplog.text and "checkpoints/final.ckpt" in caplog.text
    assert not (tmp_path / run_files.FETCHED_DIR / run.info.run_id).exists(), "no copy kept"


def test_a_file_without_a_recorded_sha256_is_not_reused(stage1, tmp_path, caplog):
    tracker, run, _ = stage1
    with tampered(run, "checkpoints/extra.ckpt", b"slipped in beside the weights"):
        with caplog.at_level(logging.WARNING, logger="sporeflow.job.reuse"):
            assert reuse.fetch(tracker.reads, run, tmp_path) is None
    assert "checkpoints/extra.ckpt has no SHA-256" in caplog.text


@pytest.mark.parametrize("name", ["../../outside.txt", "/etc/hostname", "snap_9.npy"])
def test_a_manifest_naming_a_file_outside_its_folder_is_refused(stage1, tmp_path, caplog, name):
    tracker, run, _ = stage1
    outside = (
        tmp_path / run_files.FETCHED_DIR / "outside.txt"
    )  # where ../../ reaches from snapshots/
    outside.parent.mkdir(parents=True)
    outside.write_text("x")
    before = outside.stat().st_mtime_ns
    manifest = json.dumps({"snap_1.npy": 5, name: 7}).encode()
    with tampered(run, f"snapshots/{run_files.MANIFEST}", manifest):
        with caplog.at_level(logging.WARNING, logger="sporeflow.job.reuse"):
            assert reuse.fetch(tracker.reads, run, tmp_path) is None
    assert repr(name) in caplog.text
    assert outside.stat().st_mtime_ns == before, "no file time set outside the folder"
