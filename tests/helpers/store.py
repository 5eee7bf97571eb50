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


# measured, not computed: differ between runs (system/: the machine, sampled by the writer)
TIMING = ("per_sec", "seconds", "_time", "system/")


def record(client: MlflowClient, run) -> dict:
    """What a run holds, as comparable data: params, and each computed metric's (step, value)
    points in stored order (duplicates would show)."""
    keys = [k for k in run.data.metrics if not any(t in k for t in TIMING)]
    return {
        "params": run.data.params,
        "metrics": {
            k: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, k))
            for k in keys
        },
    }
