"""A study continued by a second sweep (the same study_name and storage, later) draws new points:
its sampler is seeded with the sweeper's seed plus the trials the study holds. Before, the same
seed replayed the first sweep's random start-up draws, trial for trial, and trained those
points again (an independent draw may still hit a point already run: the space is finite). The real
sweeper and Hydra's basic launcher in this process, on the sphere app."""

from __future__ import annotations

import optuna

from helpers.inprocess import sphere_sweep


def sphere(cfg) -> float:
    return cfg.x**2 + cfg.y**2


def test_a_continued_study_does_not_draw_the_first_sweeps_points_again(
    hydra_sweep_runner, tmp_path
):
    storage = f"sqlite:///{tmp_path / 'study.db'}"
    for sweep_no, total in enumerate((4, 8)):  # the budget counts the study's trials
        with sphere_sweep(
            hydra_sweep_runner,
            tmp_path / f"multirun{sweep_no}",
            sphere,
            [f"hydra.sweeper.n_trials={total}", f"hydra.sweeper.storage={storage}"],
        ):
            pass
    trials = optuna.load_study(study_name="sphere", storage=storage).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 8
    points = [tuple(sorted(t.params.items())) for t in trials]
    first, second = points[:4], points[4:]
    replayed = [i for i, (a, b) in enumerate(zip(first, second, strict=True)) if a == b]
    assert not replayed, f"the second sweep's trials {replayed} replay the first sweep's draws"
