"""Issue 77 items 4 and 5 without a mount: a cache folder that cannot be made is off for the
run in one line, a journal on a full device is one line, and a run deleted in the store stops
`resume=` before work and `sporeflow sync`, both naming the restore. (A read-only launch folder,
sqlite store and a full run dir need a mount: tests/e2e/test_unwritable_places.py.)"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import pytest

from helpers.formats import write_jpeg_tree
from helpers.inprocess import TINY, run_train_here, sporeflow_here


@contextlib.contextmanager
def said_by(name: str) -> Iterator[list[logging.LogRecord]]:
    """The records logger `name` gives while the block runs."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)


IMAGE_FOLDER = [
    "dataset=imagenet",
    "dataset.num_classes=3",
    "dataset.image_size=32",
    "dataset.batch_size=2",
    "model=mlp",
    "model.hidden=8",
    "epochs=1",
]


def test_a_cache_that_cannot_be_written_is_off_for_the_run_in_one_line(tmp_path):
    """XDG_CACHE_HOME under a file (a folder no user, root included, can make: as a read-only
    home): an image-folder job gave a traceback from its image-check record, exit 1 and an
    empty run dir. Now one warning line names the cache and the job trains."""
    write_jpeg_tree(tmp_path / "tree", train=2, val=1)
    (tmp_path / "a-file").write_text("not a folder")
    cache = tmp_path / "a-file" / "cache"
    with said_by("sporeflow.storage.cache") as records:  # Hydra sets the root logger's handlers
        done = run_train_here(
            [*IMAGE_FOLDER, f"dataset.root={tmp_path / 'tree'}", "tracking.enabled=false"],
            tmp_path,
            env={"XDG_CACHE_HOME": str(cache)},
        )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    said = [r.getMessage() for r in records if "image-checks" in r.getMessage()]
    assert len(said) == 1, said
    assert f"cache {cache / 'sporeflow' / 'image-checks'} cannot be written" in said[0]
    assert "off for this run" in said[0] and "XDG_CACHE_HOME" in said[0]
    assert (tmp_path / "run" / "checkpoints" / "final.ckpt").is_file()


def test_a_journal_on_a_full_device_is_one_line_naming_it(tmp_path):
    """A journal the device cannot take (/dev/full: ENOSPC at every write) raised OSError
    [Errno 28] three times chained; now DiskFullError naming the file, and every later append
    raises it again without writing (a line after a torn one would be glued to it)."""
    from sporeflow.storage.files import DiskFullError
    from sporeflow.tracking.journal import Journal, Op

    with pytest.raises(DiskFullError, match=r"^no space left writing /dev/full: .* MB free"):
        Journal("/dev/full", {"uri": "sqlite:///x.db"})  # type: ignore[arg-type]
    journal = Journal(tmp_path / "j.jsonl", {"uri": "sqlite:///x.db"})
    journal._file.close()
    journal._file = open("/dev/full", "a", encoding="utf-8")
    for _ in range(2):
        with pytest.raises(DiskFullError, match="no space left writing"):
            journal.append(Op.tags, run="sf-x", tags={"a": "b"})
    journal.close()  # what the full device did not take is dropped, not raised again


def _deleted_run(tmp_path) -> tuple[str, str]:
    """A finished tiny run in `tmp_path/run`, then deleted in its store: (MLflow id, uri)."""
    from mlflow.tracking import MlflowClient

    done = run_train_here([*TINY, "epochs=1"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    client.delete_run(run.info.run_id)
    return run.info.run_id, uri


def test_resume_of_a_deleted_run_is_refused_naming_the_restore(tmp_path):
    """A run deleted in MLflow, then `resume=<its run dir>`: the job trained, waited 30 s for
    "run sf-... is not in the store yet" and kept its records; now exit 2 before any work, one
    line naming the run and the restore command."""
    run_id, uri = _deleted_run(tmp_path)
    done = run_train_here(
        [*TINY, "epochs=2", f"resume={tmp_path / 'run'}"], tmp_path, run_dir="again"
    )
    assert done.returncode == 2, done.stderr[-3000:]
    (line,) = done.stderr.rstrip("\n").split("\n")
    assert line.startswith(f"Config error: resume={tmp_path / 'run'}: run sf-"), line
    assert f"(MLflow run {run_id}) was deleted in the MLflow store {uri}" in line
    assert f"mlflow runs restore --run-id {run_id}" in line and "restore_run" in line
    assert not (tmp_path / "again").exists()


def left_behind(owner_dir, uri: str, records) -> None:
    """A journal in `owner_dir` holding `records` (op, fields), left by a process that is gone."""
    from sporeflow.core.processes import this_process
    from sporeflow.tracking.journal import Journal

    owner = {**this_process(), "started": 0.0}  # a process that is gone
    header = {"uri": uri, "experiment": "sporeflow", "artifact_root": None, "owner": owner}
    journal = Journal.create(owner_dir, {**header, "drain_timeout": 1, "writer": "own"})
    for op, fields in records:
        journal.append(op, **fields)
    journal.close()


def test_sync_of_a_deleted_run_names_the_restore_and_sends_after_it(tmp_path):
    """Records of a deleted run (a journal its owner left: a resume journalled before the run
    was deleted): `sporeflow sync` said "is not in the store yet (another journal creates
    it)"; now the same line as resume=, and once restored it sends them all."""
    from mlflow.tracking import MlflowClient

    from sporeflow.storage.run_marker import read_run_marker
    from sporeflow.tracking.journal import Op

    run_id, uri = _deleted_run(tmp_path)
    key = read_run_marker(tmp_path / "run")["mlflow_run_id"]
    left_behind(
        tmp_path / "left",
        uri,
        [
            (Op.resume, {"run": key, "process": {}}),
            (Op.metrics, {"run": key, "points": [["late/acc", 0.5, 1, 7]]}),
            (Op.end, {"run": key, "status": "FINISHED"}),
        ],
    )

    done = sporeflow_here(tmp_path, "sync", str(tmp_path / "left"))
    assert done.returncode == 1, done.stderr
    (line,) = done.stdout.rstrip("\n").split("\n")
    assert "sent 0 records, 3 left" in line and "not in the store yet" not in line
    assert f"(MLflow run {run_id}) was deleted in the MLflow store {uri}" in line
    assert f"mlflow runs restore --run-id {run_id}" in line
    assert f"sporeflow sync {tmp_path / 'left'}" in line

    MlflowClient(tracking_uri=uri).restore_run(run_id)
    done = sporeflow_here(tmp_path, "sync", str(tmp_path / "left"))
    assert done.returncode == 0 and "sent 3 records, 0 left" in done.stdout, done.stdout
    history = MlflowClient(tracking_uri=uri).get_metric_history(run_id, "late/acc")
    assert [(m.step, m.value) for m in history] == [(7, 0.5)]


def test_sync_into_a_deleted_experiment_names_the_restore_and_sends_after_it(tmp_path):
    """Records journalled before their experiment was deleted: `sync` had the store refuse the
    run's creation (counted, never sent again) and then waited for the run "another journal
    creates"; now every record waits, one line names the restore, and after it all are sent."""
    from mlflow.tracking import MlflowClient

    from sporeflow.tracking.journal import Op, new_run_key

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment_id = client.create_experiment("sporeflow")
    client.delete_experiment(experiment_id)
    key = new_run_key()
    left_behind(
        tmp_path / "left",
        uri,
        [
            (Op.create_run, {"run": key, "name": "late", "tags": {}}),
            (Op.metrics, {"run": key, "points": [["late/acc", 0.5, 1, 7]]}),
        ],
    )
    done = sporeflow_here(tmp_path, "sync", str(tmp_path / "left"))
    assert done.returncode == 1, done.stderr
    (line,) = done.stdout.rstrip("\n").split("\n")
    assert "sent 0 records, 2 left" in line, line
    assert f"experiment {experiment_id} was deleted in the MLflow store {uri}" in line
    assert f"mlflow experiments restore --experiment-id {experiment_id})" in line

    client.restore_experiment(experiment_id)
    done = sporeflow_here(tmp_path, "sync", str(tmp_path / "left"))
    assert done.returncode == 0 and "sent 2 records, 0 left" in done.stdout, done.stdout
    (run,) = client.search_runs([experiment_id])
    assert run.data.metrics == {"late/acc": 0.5}
