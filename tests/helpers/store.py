"""Read what a run left in the launch dir's MLflow store (the real sqlite file)."""

from __future__ import annotations

from pathlib import Path

from mlflow.tracking import MlflowClient

from sporeflow.core.uris import sqlite_uri


def client_of(launch_dir: Path) -> MlflowClient:
    return MlflowClient(sqlite_uri(Path(launch_dir) / "mlflow.db"))


def runs_of(launch_dir: Path, experiment: str = "sporeflow") -> list:
    """Every run of the experiment (none when the store or the experiment does not exist)."""
    if not (Path(launch_dir) / "mlflow.db").exists():
        return []
    client = client_of(launch_dir)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], max_results=1000) if exp else []


def by_stage(runs) -> dict:
    """Runs grouped by their `stage` tag (train, pipeline, stage1, stage2, baseline, ...)."""
    found: dict = {}
    for run in runs:
        found.setdefault(run.data.tags["stage"], []).append(run)
    return found


def only_run(db_uri: str):
    """(client, the run) of a store that must hold exactly one run of the experiment."""
    client = MlflowClient(db_uri)
    exp = client.get_experiment_by_name("sporeflow")
    runs = client.search_runs([exp.experiment_id])
    assert len(runs) == 1
    return client, runs[0]
