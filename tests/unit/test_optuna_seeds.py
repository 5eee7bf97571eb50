"""Seeds inside an Optuna trial (issue 33): `hydra.sweeper.seeds` makes each trial one job per
seed, and the study is told one value over them (`seed_statistic`). The statistic against
statsmodels' t interval; a real sweep through the real sweeper and Hydra's basic launcher in
this process (Hydra's own sweep runner) on the sphere app; the refusals, as `python train.py`
answers them in this process."""

from __future__ import annotations

import csv

import numpy as np
import optuna
import pytest
from statsmodels.stats.weightstats import DescrStatsW

from helpers.inprocess import TINY, sphere_sweep, train_cli
from hydra_plugins.sporeflow_optuna_sweeper.seeds import trial_value

# each seed moves the sphere's value: seed 2's job is the noisiest
NOISE = {1: 0.3, 2: -1.1, 3: 0.5}


@pytest.mark.parametrize("k", [2, 3, 5])
def test_lcb_is_the_pessimistic_end_of_the_t_interval(k):
    rng = np.random.default_rng(k)
    values = list(rng.normal(0.8, 0.05, size=k))
    low, high = DescrStatsW(np.array(values)).tconfint_mean(alpha=0.05)
    assert trial_value(values, "lcb", maximize=True) == pytest.approx(low, rel=1e-12)
    assert trial_value(values, "lcb", maximize=False) == pytest.approx(high, rel=1e-12)
    assert trial_value(values, "mean", maximize=True) == pytest.approx(np.mean(values))


def sphere_with_noise(cfg) -> float:
    return cfg.x**2 + cfg.y**2 + NOISE[cfg.seed]


def test_a_trial_of_seeds_runs_a_job_per_seed_and_tells_their_statistic(
    hydra_sweep_runner, tmp_path
):
    """Three trials over seeds 1,2,3: jobs 0..8 (trial t's seeds are jobs 3t..3t+2), each with
    the trial's parameters and its own seed; each trial's value in the study is the upper end
    of the t interval of its jobs' values (sphere is minimised: the pessimistic end)."""
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    sweep = sphere_sweep(
        hydra_sweep_runner,
        tmp_path / "multirun",
        sphere_with_noise,
        [
            "hydra.sweeper.n_trials=3",
            f"hydra.sweeper.storage={storage}",
            "hydra.sweeper.seeds=[1,2,3]",
            "hydra.sweeper.seed_statistic=lcb",
        ],
    )
    with sweep:
        returns = [ret for batch in sweep.returns for ret in batch]
        with open(tmp_path / "multirun" / "optuna_trials.csv", newline="") as f:
            rows = list(csv.DictReader(f))
        job_seeds = {int(ret.hydra_cfg.hydra.job.num): list(ret.overrides) for ret in returns}
    assert sorted(job_seeds) == list(range(9))
    study = optuna.load_study(study_name="sphere", storage=storage)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 3
    for trial in study.trials:
        jobs = [r for r in rows if int(r["trial"]) == trial.number]
        assert [int(r["job"]) for r in jobs] == [3 * trial.number + i for i in range(3)]
        assert [int(r["seed"]) for r in jobs] == [1, 2, 3]
        expected = trial.params["x"] ** 2 + trial.params["y"] ** 2
        values = np.array([float(r["job_value"]) for r in jobs])
        np.testing.assert_allclose(values, [expected + NOISE[s] for s in (1, 2, 3)])
        _, high = DescrStatsW(values).tconfint_mean(alpha=0.05)
        assert trial.value == pytest.approx(high, rel=1e-9)
        assert {float(r["value"]) for r in jobs} == {trial.value}
        for r in jobs:  # the job ran the trial's parameters with its own seed
            overrides = job_seeds[int(r["job"])]
            assert f"seed={r['seed']}" == overrides[-1]
            assert f"x={trial.params['x']}" in overrides


def test_a_failed_seed_fails_its_trial_naming_the_seed(hydra_sweep_runner, tmp_path):
    def fails_on_seed_2(cfg) -> float:
        if cfg.seed == 2:
            raise RuntimeError("diverged")
        return sphere_with_noise(cfg)

    storage = f"sqlite:///{tmp_path / 'study.db'}"
    sweep = sphere_sweep(
        hydra_sweep_runner,
        tmp_path / "multirun",
        fails_on_seed_2,
        [
            "hydra.sweeper.n_trials=1",
            f"hydra.sweeper.storage={storage}",
            "hydra.sweeper.seeds=[1,2]",
            "hydra.sweeper.max_failure_rate=1",
        ],
    )
    with sweep:
        pass
    (trial,) = optuna.load_study(study_name="sphere", storage=storage).trials
    assert trial.state.name == "FAIL"
    assert trial.user_attrs["sporeflow.error"] == "seed 2: RuntimeError: diverged"


@pytest.mark.parametrize(
    "override, message",
    [
        ("hydra.sweeper.seeds=[]", "hydra.sweeper.seeds=[]: name the seeds each trial runs"),
        ("hydra.sweeper.seeds=[1,2,1]", "hydra.sweeper.seeds=[1, 2, 1]: seed 1 is named twice"),
        (
            "hydra.sweeper.seed_statistic=median",
            "hydra.sweeper.seed_statistic='median': allowed are mean, lcb",
        ),
        (
            "hydra.sweeper.seeds=[1] hydra.sweeper.seed_statistic=lcb",
            "hydra.sweeper.seed_statistic=lcb needs at least 2 seeds",
        ),
        (
            "hydra.sweeper.seeds=[1,2] seed=3",
            "seed is set both on the command line (or in hydra.sweeper.params) and by "
            "hydra.sweeper.seeds=[1, 2]: drop one",
        ),
        (
            "hydra.sweeper.seeds=[1,2] hydra.sweeper.pruner=median",
            "hydra.sweeper.pruner=median with hydra.sweeper.seeds: a trial of several seeds",
        ),
    ],
)
def test_bad_seed_settings_exit_2_naming_the_key_before_any_job(tmp_path, override, message):
    args = ["-m", "hparams_search=dim_reduce_optuna", *TINY, *override.split()]
    args.append(f"hydra.sweep.dir={tmp_path}/multirun")
    code, err = train_cli(args, tmp_path, run_dir=None)
    assert code == 2 and message in err, err[-3000:]
    assert "Traceback" not in err
    assert not list(tmp_path.glob("multirun/*/.hydra")), "no job may start"
    assert not (tmp_path / "mlflow.db").exists(), "no sweep run may start"
