"""The race sweeper (issue 33, item 3): F-race's tests against scipy and scikit-posthocs; a real
race through the real sweeper and Hydra's basic launcher in this process (Hydra's own sweep
runner) on the sphere app, its course re-derived round by round from race.csv with those
references; the refusals, as `python train.py` answers them in this process."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import scikit_posthocs
from scipy.stats import friedmanchisquare, wilcoxon

from helpers.inprocess import sphere_sweep, train_cli
from hydra_plugins.sporeflow_race_sweeper.elimination import conover_p, judge, ranks_within_blocks


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_conover_p_values_match_scikit_posthocs(seed):
    rng = np.random.default_rng(seed)
    blocks, points = 4 + seed, 3 + seed % 3
    values = rng.normal(size=(blocks, points)) + np.arange(points) * 0.4
    values[0, :2] = values[0, 0]  # a tie within a block
    ranks = ranks_within_blocks(values)
    best = int(np.argmin(ranks.sum(axis=0)))
    reference = scikit_posthocs.posthoc_conover_friedman(values).to_numpy()
    expected = np.delete(reference[best], best)
    np.testing.assert_allclose(np.delete(conover_p(ranks, best), best), expected, rtol=1e-10)


def test_a_point_worse_on_every_seed_is_dropped_and_equals_are_kept():
    rng = np.random.default_rng(7)
    values = rng.normal(0.9, 0.01, size=(6, 4))
    values[:, 3] -= 0.2  # accuracy: point 3 is worst on every seed
    verdict = judge(values, maximize=True, alpha=0.05)
    assert verdict.test == "Friedman" and verdict.p_value == pytest.approx(
        friedmanchisquare(*(-values).T).pvalue
    )
    assert 3 in verdict.dropped and 3 not in verdict.kept
    same = np.tile([0.5, 0.5, 0.5], (5, 1))
    assert judge(same, maximize=True, alpha=0.05).dropped == []
    two = np.column_stack([np.arange(8.0), np.arange(8.0) + 1])  # a loss: the second is worse
    verdict = judge(two, maximize=False, alpha=0.05)
    assert verdict.test == "Wilcoxon" and verdict.dropped == [1]
    assert verdict.p_value == pytest.approx(wilcoxon(two[:, 0], two[:, 1]).pvalue)


def noisy_sphere(cfg) -> float:
    """x plus noise of the (seed, x) cell: minimised, so x=0 is best on average."""
    rng = np.random.default_rng(1000 * cfg.seed + cfg.x)
    return float(cfg.x) * 0.6 + float(rng.normal(0.0, 0.5))


def read_race(sweep_dir: Path) -> list[dict]:
    with open(sweep_dir / "race.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_a_race_drops_what_its_tests_show_worse_and_runs_no_more_seeds_of_it(
    hydra_sweep_runner, tmp_path, capsys
):
    """Four points, up to eight seeds. Each round's jobs are the points still in, numbered on
    from the last round's; after each round from the second, the points dropped are exactly
    those scipy's Friedman test and scikit-posthocs' Conover test (or scipy's Wilcoxon, for two)
    show worse than the best at 5%, recomputed from the values race.csv recorded."""
    with sphere_sweep(hydra_sweep_runner, tmp_path / "multirun", noisy_sphere, [], "race"):
        rows = read_race(tmp_path / "multirun")
    err = capsys.readouterr().err
    alive = ["x=0", "x=1", "x=2", "x=3"]
    values: dict[str, dict[int, float]] = {p: {} for p in alive}
    job = 0
    rounds = sorted({int(r["round"]) for r in rows})
    for number in rounds:
        ran = [r for r in rows if int(r["round"]) == number and r["state"] == "ran"]
        assert [r["point"] for r in ran] == alive, f"round {number} ran what is still in"
        assert [int(r["job"]) for r in ran] == list(range(job, job + len(ran)))
        job += len(ran)
        for r in ran:
            values[r["point"]][int(r["seed"])] = float(r["value"])
        matrix = np.array([[values[p][s] for p in alive] for s in sorted(values[alive[0]])])
        dropped = {
            r["point"] for r in rows if int(r["round"]) == number and r["state"] == "dropped"
        }
        assert dropped == expected_drops(matrix, alive) if number >= 2 else not dropped
        alive = [p for p in alive if p not in dropped]
    assert len(alive) == 1 or rounds[-1] == 8
    assert "x=3" not in alive, "x=3 is 1.8 worse than x=0 on average with noise sd 0.5"
    last = err.strip().splitlines()[-1]
    assert last.startswith("[sporeflow] race: ") and all(p in last for p in alive), last


def expected_drops(matrix: np.ndarray, points: list[str]) -> set[str]:
    """What F-race drops (minimising) from seeds x points, with the references' tests."""
    if len(points) == 2:
        if not np.any(matrix[:, 0] - matrix[:, 1]):
            return set()
        if wilcoxon(matrix[:, 0], matrix[:, 1]).pvalue >= 0.05:
            return set()
        return {points[0] if (matrix[:, 0] - matrix[:, 1]).sum() > 0 else points[1]}
    if friedmanchisquare(*matrix.T).pvalue >= 0.05:
        return set()
    sums = ranks_within_blocks(matrix).sum(axis=0)
    best = int(np.argmin(sums))
    p = scikit_posthocs.posthoc_conover_friedman(matrix).to_numpy()[best]
    return {points[j] for j in range(len(points)) if sums[j] > sums[best] and p[j] < 0.05}


@pytest.mark.parametrize(
    "override, message",
    [
        ("hydra.sweeper.max_seeds=1", "hydra.sweeper.max_seeds=1: must be >= 2"),
        ("hydra.sweeper.alpha=1.5", "hydra.sweeper.alpha=1.5: must be in (0, 1)"),
        (
            "boost.rho=0.4 boost.sigma=0.2",
            "a race needs at least 2 points, the grid has 1",
        ),
        (
            "seed=3",
            "seed is set on the command line (or in hydra.sweeper.params) of a race",
        ),
        (
            "boost.rho=interval(0.3,0.8)",
            "a race (hydra/sweeper=sporeflow_race): boost.rho is continuous",
        ),
    ],
)
def test_bad_race_settings_exit_2_naming_the_key_before_any_job(tmp_path, override, message):
    args = ["-m", "hparams_search=dim_reduce_race", "tracking.enabled=false", *override.split()]
    args.append(f"hydra.sweep.dir={tmp_path}/multirun")
    code, err = train_cli(args, tmp_path, run_dir=None)
    assert code == 2 and message in err, err[-3000:]
    assert "Traceback" not in err
    assert not list(tmp_path.glob("multirun/*/.hydra")), "no job may start"


def test_a_race_of_the_dim_reduce_job_trains_each_seeds_stage1_once_and_decides(
    tmp_path, monkeypatch
):
    """`python train.py -m hparams_search=dim_reduce_race` of the debug pipeline on tiny data,
    in this process: two settings of rho raced over two seeds (four jobs, numbered on across
    the rounds), one stage 1 per seed shared by both settings, one MLflow parent with the four
    jobs as children, the race's end line and then the sweep's decision on the per-image
    outcomes (a tie or a winner, tagged on the parent)."""
    from helpers.inprocess import TINY_PIPELINE
    from helpers.store import by_stage, runs_of

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    args = ["-m", "hparams_search=dim_reduce_race", *TINY_PIPELINE, "hydra.sweeper.max_seeds=2"]
    args += ["~hydra.sweeper.params.boost.sigma", "hydra.sweeper.params.boost.rho='0.4,0.7'"]
    code, err = train_cli([*args, f"hydra.sweep.dir={tmp_path}/multirun"], tmp_path, run_dir=None)
    assert code == 0, err[-3000:]
    rows = read_race(tmp_path / "multirun")
    assert [(r["round"], r["seed"], r["job"], r["point"]) for r in rows] == [
        ("1", "1", "0", "boost.rho=0.4"),
        ("1", "1", "1", "boost.rho=0.7"),
        ("2", "2", "2", "boost.rho=0.4"),
        ("2", "2", "3", "boost.rho=0.7"),
    ]
    stages = by_stage(runs_of(tmp_path))
    (parent,) = stages["sweep"]
    assert parent.info.status == "FINISHED"
    assert len(stages["stage1"]) == 2, "one stage 1 per seed, reused by the other setting"
    pipelines = [r for r in runs_of(tmp_path) if r.data.tags.get("sweep.run_id")]
    assert len(pipelines) == 4
    assert "[sporeflow] race: 2 points left after 2 rounds" in err
    decision = parent.data.tags["sporeflow.decision"]
    assert decision in ("winner", "tie")
    assert any(line.startswith(f"{decision}: boost.rho=") for line in err.splitlines()), err[-2000:]
