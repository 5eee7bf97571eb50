"""A new sqlite MLflow store, built whole in a side file and copied from a kept empty one.

MLflow builds a store by running every schema migration (about 3.5 s of CPU for a fresh file:
each test, each new launch dir, paid by the first job's writer). The first build under an MLflow
version is kept in the user cache without its "Default" experiment; later stores are copies of it,
and MLflow adds "Default" (with the artifact location it gives it) when the copy is first opened.
A store is always built in `<db>.creating` and linked to its name, so a process killed
mid-build leaves no half-built database that every later open would refuse.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
from importlib.metadata import version
from pathlib import Path

from sporeflow.core.uris import sqlite_uri
from sporeflow.storage.cache import user_cache_dir
from sporeflow.storage.files import atomic_path
from sporeflow.storage.locks import exclusive


def migrate(db: Path) -> None:
    """Run MLflow's schema migrations on the (new) sqlite file `db`, then let go of it."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    from mlflow.tracking import MlflowClient

    uri = sqlite_uri(db)
    MlflowClient(tracking_uri=uri).search_experiments(max_results=1)  # runs every migration
    engine = SqlAlchemyStore._engine_map.pop(uri, None)  # noqa: SLF001  (MLflow caches per URI)
    if engine is not None:
        engine.dispose()


def empty_store() -> Path:
    """The kept empty store of this MLflow version (built once, under a lock, atomically)."""
    kept = user_cache_dir("mlflow") / f"empty-store-mlflow{version('mlflow')}.db"
    if kept.exists():
        return kept
    with exclusive(kept.with_name(kept.name + ".lock")):
        if not kept.exists():
            for stale in kept.parent.glob(f".{kept.stem}.*.tmp.db"):
                stale.unlink()  # left by a process killed mid-build (we hold the lock)
            with atomic_path(kept) as tmp:
                migrate(tmp)
                with sqlite3.connect(tmp) as db:  # "Default" gets its location where it is used
                    db.execute("DELETE FROM experiment_tags WHERE experiment_id = 0")
                    db.execute("DELETE FROM experiments WHERE experiment_id = 0")
                db.close()
    return kept


def create_sqlite_store(db: Path) -> None:
    """Build an empty MLflow store at `db` all at once (call under the store's lock): a copy of
    `empty_store()` (or, when the user cache cannot be written, a migration) in
    `<db>.creating`, which then gets the real name unless one exists by now."""
    db.parent.mkdir(parents=True, exist_ok=True)
    partial_db = db.with_name(db.name + ".creating")
    partial_db.unlink(missing_ok=True)  # left by a process killed while creating
    try:
        shutil.copyfile(empty_store(), partial_db)
    except OSError:
        partial_db.unlink(missing_ok=True)
        migrate(partial_db)
    with open(partial_db, "rb+") as f:
        os.fsync(f.fileno())
    try:
        os.link(partial_db, db)  # never over a store another program (mlflow ui) made meanwhile
    except FileExistsError:
        pass
    finally:
        partial_db.unlink()
