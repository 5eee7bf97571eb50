"""A sweep's saved view of MLflow's UI (report.views): what it filters, sorts, shows and plots.
The browser test (e2e/test_sweeps.py) checks MLflow's UI opens it; this checks its content."""

from __future__ import annotations

import json

from sporeflow.report import views

PIPELINE = [
    "val/stage1/acc",
    "val/stage2/acc",
    "test/stage2/acc",
    "val/gain",
    "test/gain",
    "test/gain_ci_low",
    "test/gain_ci_high",
    "test/gain_p_value",
    "pca_seconds",
    "vs_stage1/images",
]


def test_a_pipeline_sweep_view_filters_sorts_and_shows_the_deciding_columns():
    view = views.sweep_view("abc", ["boost.rho", "boost.sigma"], "val/stage2/acc", PIPELINE)
    assert view["searchFilter"] == "tags.`sweep.run_id` = 'abc'"
    assert view["orderByKey"] == "metrics.`val/stage2/acc`" and view["orderByAsc"] is False
    assert view["selectedColumns"][:2] == ["params.`boost.rho`", "params.`boost.sigma`"]
    shown = [c for c in view["selectedColumns"] if c.startswith("metrics.")]
    assert shown == [
        f"metrics.`{m}`" for m in PIPELINE[:8]
    ]  # in the table's order, not the others the runs have
    assert view["groupBy"] is None  # no seed swept
    axes = [(c["xaxis"]["key"], c["yaxis"]["key"]) for c in view["compareRunCharts"]]
    assert axes == [
        ("val/stage1/acc", "val/stage2/acc"),
        ("boost.rho", "val/stage2/acc"),
        ("boost.sigma", "val/stage2/acc"),
    ]
    assert {c["metricSectionId"] for c in view["compareRunCharts"]} == {views.SECTION}


def test_a_loss_objective_sorts_ascending_and_a_seed_sweep_is_grouped():
    view = views.sweep_view(
        "abc", ["seed", "optimizer.lr"], "final/loss", ["final/acc", "final/loss"]
    )
    assert view["orderByAsc"] is True
    assert view["groupBy"]["groupByKeys"] == [{"mode": "param", "groupByData": "optimizer.lr"}]
    assert "attributes.`Models`" in view["selectedColumns"]  # a plain job's run has its model


def test_the_encoded_view_fits_an_experiment_tag():
    keys = [f"boost.key_{i}" for i in range(6)]
    encoded = views.encode(views.sweep_view("a" * 32, keys, "val/stage2/acc", PIPELINE))
    assert json.loads(encoded)["searchFilter"].endswith("'" + "a" * 32 + "'")
    assert len(encoded) < 20000  # MLflow 3.17's limit on an experiment tag value
