"""Which settings mattered (report.importance): the study built from a sweep's jobs (one trial
per point, its seeds averaged; distributions over the swept ranges), the importances against
Optuna's own evaluator called directly on an independently built study, nothing below 4 points
or with one varied setting; and a 4-point sweep run in this process, read back from its parent."""

from __future__ import annotations

import math
import os
import random

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.importance import PedAnovaImportanceEvaluator, get_param_importances

from helpers.store import runs_of
from helpers.sweeps import run_sweep
from sporeflow.report import importance
from sporeflow.report.sweep_report import Job

KEYS = ["boost.rho", "model.hidden", "model", "seed"]
ACC = "val/stage2/acc"


def job(number: int, rho: str, hidden: str, model: str, seed: str, acc: float, status="FINISHED"):
    values = {"boost.rho": rho, "model.hidden": hidden, "model": model, "seed": seed}
    return Job(number, f"run{number}", "", status, values, {ACC: acc}, seed=seed)


def sweep_jobs() -> list[Job]:
    """Six points of two seeds each, plus a failed job and one whose objective is NaN."""
    grid = [
        (r, h, m) for r in ("0.3", "0.8") for h, m in (("8", "mlp"), ("16", "cnn"), ("8", "cnn"))
    ]
    jobs = []
    for i, (rho, hidden, model) in enumerate(grid):
        acc = 0.5 + 0.3 * float(rho) + 0.01 * int(hidden) + (0.05 if model == "cnn" else 0.0)
        jobs.append(job(2 * i, rho, hidden, model, "1", acc - 0.01))
        jobs.append(job(2 * i + 1, rho, hidden, model, "2", acc + 0.03))
    jobs.append(job(20, "0.5", "8", "mlp", "1", 0.99, status="FAILED"))
    jobs.append(job(21, "0.5", "8", "mlp", "2", math.nan))
    return jobs


def test_the_study_has_one_trial_per_point_with_its_seeds_averaged():
    study = importance.study_of_jobs(sweep_jobs(), KEYS, ACC)
    trials = study.get_trials()
    assert study.direction == optuna.study.StudyDirection.MAXIMIZE
    assert len(trials) == 6, "6 points; the failed job and the NaN one count for nothing"
    dists = trials[0].distributions
    assert set(dists) == {"boost.rho", "model.hidden", "model"}, "the seed is not a setting"
    assert dists["boost.rho"] == FloatDistribution(0.3, 0.8)
    assert dists["model.hidden"] == IntDistribution(8, 16)
    assert dists["model"] == CategoricalDistribution(["cnn", "mlp"])
    for trial in trials:
        p = trial.params
        want = 0.5 + 0.3 * p["boost.rho"] + 0.01 * p["model.hidden"] + 0.01
        want += 0.05 if p["model"] == "cnn" else 0.0
        assert trial.value == pytest.approx(want), "the mean of its two seeds"
        assert isinstance(p["model.hidden"], int) and isinstance(p["boost.rho"], float)


def test_a_loss_is_minimised():
    jobs = [job(i, r, "8", "mlp", "1", 0.1 * i) for i, r in enumerate(["0.3", "0.4", "0.5"])]
    for j in jobs:
        j.metrics = {"final/val/loss": j.metrics[ACC]}
    study = importance.study_of_jobs(jobs, KEYS, "final/val/loss")
    assert study.direction == optuna.study.StudyDirection.MINIMIZE


def independent_study(points: list[tuple[float, int, str, float]]) -> optuna.Study:
    """The same study, built here from the points without sporeflow."""
    dists = {
        "boost.rho": FloatDistribution(0.3, 0.8),
        "model.hidden": IntDistribution(8, 16),
        "model": CategoricalDistribution(["cnn", "mlp"]),
    }
    study = optuna.create_study(direction="maximize")
    for rho, hidden, model, value in points:
        params = {"boost.rho": rho, "model.hidden": hidden, "model": model}
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
    return study


def test_the_importances_are_optunas_own_on_the_same_study():
    found = importance.evaluate(importance.study_of_jobs(sweep_jobs(), KEYS, ACC))
    points = []
    for rho in (0.3, 0.8):
        for hidden, model in ((8, "mlp"), (16, "cnn"), (8, "cnn")):
            acc = 0.5 + 0.3 * rho + 0.01 * hidden + (0.05 if model == "cnn" else 0.0) + 0.01
            points.append((rho, hidden, model, acc))
    # 6 trials: 5/6 of them would be the top Optuna advises; capped at half the study
    evaluator = PedAnovaImportanceEvaluator(target_quantile=0.5)
    want = get_param_importances(independent_study(points), evaluator=evaluator)
    assert found.values == pytest.approx(want)
    assert list(found.values) == list(want), "largest first, as Optuna orders them"
    assert sum(found.values.values()) == pytest.approx(1.0)
    assert found.points == 6 and found.top == 3
    assert found.metrics() == {f"importance/{k}": v for k, v in want.items()}
    line = found.line()
    assert line.startswith("importances: ")
    assert "(PED-ANOVA, 6 points, 95% bootstrap intervals over them; rough: 3 points" in line
    first = next(iter(want))
    low, high = found.intervals[first]  # issue 76 item 2: each share with its uncertainty
    assert 0.0 <= low <= high <= 1.0
    assert f"{first} {want[first]:.2f} ({low:.2f}..{high:.2f})" in line


def test_a_large_study_gets_optunas_default_evaluator():
    """From 50 points on, Optuna's default (target_quantile 0.1 holds 5 or more trials)."""
    rng = random.Random(3)
    points = []
    for _ in range(60):
        rho, hidden, model = rng.uniform(0.3, 0.8), rng.randint(8, 16), rng.choice(["cnn", "mlp"])
        points.append((rho, hidden, model, rho + 0.001 * hidden + rng.gauss(0, 0.01)))
    found = importance.evaluate(independent_study(points))
    want = get_param_importances(independent_study(points))  # Optuna's default evaluator
    assert found.values == pytest.approx(want)
    assert found.target_quantile == 0.1 and found.top == 6
    assert "rough" not in found.line()
    assert found.line().endswith("(PED-ANOVA, 60 points, 95% bootstrap intervals over them)")
    low, high = found.intervals["boost.rho"]
    assert low > 0.5 and high <= 1.0, "60 points: the dominant setting's share is narrow"
    assert next(iter(found.values)) == "boost.rho"


def test_fewer_than_4_points_or_one_varied_setting_give_nothing(tmp_path):
    three = [j for j in sweep_jobs() if j.values["boost.rho"] == "0.3"]
    assert len({(j.values["model.hidden"], j.values["model"]) for j in three}) == 3
    assert importance.evaluate(importance.study_of_jobs(three, KEYS, ACC)) is None
    one_key = [job(i, r, "8", "mlp", "1", 0.1 * i) for i, r in enumerate("0.3 0.4 0.5 0.6".split())]
    assert importance.evaluate(importance.study_of_jobs(one_key, KEYS, ACC)) is None
    assert importance.evaluate(importance.study_of_jobs(one_key, ["boost.rho"], ACC)) is None


def test_the_figure_is_written(tmp_path):
    found = importance.evaluate(importance.study_of_jobs(sweep_jobs(), KEYS, ACC))
    path = importance.figure(found, tmp_path / importance.FIGURE)
    assert path is not None and path.stat().st_size > 1000


LRS, HIDDEN = ("0.05", "0.2"), ("8", "16")


def test_a_sweep_of_4_points_records_its_importances_on_its_parent(tmp_path, capsys):
    """Ranked by the validation loss (the tiny jobs' accuracies tie): the learning rate moves it,
    the hidden width (of an MLP trained one epoch from the same seed) hardly."""
    os.environ.pop("MLFLOW_TRACKING_URI", None)
    fixed = ["epochs=1", "sweep.objective=val/loss"]
    jobs = [[f"optimizer.lr={lr}", f"model.hidden={h}", *fixed] for lr in LRS for h in HIDDEN]
    task = [f"optimizer.lr={','.join(LRS)}", f"model.hidden={','.join(HIDDEN)}", *fixed]
    callback = run_sweep(tmp_path, jobs, task)
    err = capsys.readouterr().err
    runs = runs_of(tmp_path)
    parent = next(r for r in runs if r.info.run_id == callback.run_id)
    children = [r for r in runs if r.data.tags.get("sweep.run_id") == callback.run_id]
    assert len(children) == 4
    dists = {"optimizer.lr": FloatDistribution(0.05, 0.2), "model.hidden": IntDistribution(8, 16)}
    study = optuna.create_study(direction="minimize")
    for run in children:
        params = {
            "optimizer.lr": float(run.data.params["optimizer.lr"]),
            "model.hidden": int(run.data.params["model.hidden"]),
        }
        value = run.data.metrics["final/val/loss"]
        study.add_trial(optuna.trial.create_trial(params=params, distributions=dists, value=value))
    want = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(target_quantile=0.5))
    got = {k: v for k, v in parent.data.metrics.items() if k.startswith("importance/")}
    assert got == pytest.approx({f"importance/{k}": v for k, v in want.items()})
    assert want["optimizer.lr"] > want["model.hidden"]
    assert (tmp_path / "multirun" / importance.FIGURE).is_file()
    (line,) = [x for x in err.splitlines() if x.startswith("importances: ")]
    lr = want["optimizer.lr"]
    assert line.startswith(f"importances: optimizer.lr {lr:.2f} (")
    assert line.endswith(
        "(PED-ANOVA, 4 points, 95% bootstrap intervals over them; rough: 2 points in the top "
        "50%, Optuna advises 5)"
    )


def test_ties_that_fill_the_top_are_said():
    """Every point scores the same: Optuna's top quantile is the whole study and it shares the
    importance equally; the line says why the shares are equal."""
    flat = [
        job(i, r, h, "mlp", "1", 0.5)
        for i, (r, h) in enumerate([("0.3", "8"), ("0.3", "16"), ("0.8", "8"), ("0.8", "16")])
    ]
    found = importance.evaluate(importance.study_of_jobs(flat, KEYS, ACC))
    assert found.tied and found.values == pytest.approx({"boost.rho": 0.5, "model.hidden": 0.5})
    assert "tied: the top 50% holds every point" in found.line()


def test_an_optuna_sweeps_study_is_read_as_it_is(tmp_path):
    """The Optuna sweeper's study (in its storage): its own distributions and trial values,
    evaluated as Optuna evaluates it; its FAIL trials count for nothing."""
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="s", storage=storage, direction="minimize")
    rng = random.Random(5)
    for _ in range(8):
        trial = study.ask()
        x, k = trial.suggest_float("x", 0.0, 1.0, log=False), trial.suggest_int("k", 1, 4)
        study.tell(trial, (x - 0.2) ** 2 + 0.001 * k + 0.0001 * rng.random())
    study.tell(study.ask(), state=optuna.trial.TrialState.FAIL)
    found = importance.evaluate(importance.load_study("s", storage))
    want = get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(target_quantile=0.5))
    assert found.points == 8 and found.values == pytest.approx(want)
    assert importance.load_study("missing", storage) is None
