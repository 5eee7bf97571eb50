"""A small Optuna study in a sqlite file and a sweep parent run naming it, as an Optuna sweep
leaves them (entry/sweep_study.py's tags), for the tests of `sporeflow ui`'s dashboard."""

from __future__ import annotations

from pathlib import Path

from sporeflow.core.uris import sqlite_uri

EXPERIMENT = "sporeflow"


def told_study(launch_dir: Path, name: str, trials: int = 3, others: int = 1) -> tuple[str, int]:
    """(storage URL, study id) of study `name` in <launch_dir>/optuna.db with `trials` told;
    `others` studies made before it, so its id is not 1."""
    import optuna

    storage = sqlite_uri(Path(launch_dir) / "optuna.db")
    for n in range(others):
        optuna.create_study(storage=storage, study_name=f"other-{n}")
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    for n in range(trials):
        trial = study.ask({"x": optuna.distributions.FloatDistribution(0.0, 1.0)})
        study.tell(trial, 0.1 * n)
    return storage, study._study_id


def sweep_parent(launch_dir: Path, tags: dict[str, str]) -> str:
    """A sweep parent run (tags.stage = sweep) in <launch_dir>/mlflow.db; its run id."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(sqlite_uri(Path(launch_dir) / "mlflow.db"))
    exp = client.get_experiment_by_name(EXPERIMENT)
    exp_id = exp.experiment_id if exp is not None else client.create_experiment(EXPERIMENT)
    run = client.create_run(
        exp_id, run_name="sweep-20260101-000000", tags={"stage": "sweep", **tags}
    )
    client.set_terminated(run.info.run_id)
    return run.info.run_id
