"""A sweep's saved view in MLflow 3's UI: the experiment page opened with the sweep's jobs,
sorted by its objective, the columns that decide (swept keys, each stage's accuracy, gain,
its interval and p-value) and two charts (stage 2 against stage 1 per job; the swept keys
against the objective).

MLflow 3.17's UI keeps such a view in an experiment tag `mlflow.sharedViewState.<key>` and
opens it for `#/experiments/<id>/runs?viewStateShareKey=<key>` (its "share" button makes the
same tag). The state is the page's search facets (searchFilter, orderByKey, orderByAsc) and
its UI state (selectedColumns, groupBy, compareRunCharts, compareRunSections, ...), as JSON;
column keys are `metrics.`name``, `params.`name`` and `attributes.`Models``. Nothing here
talks to MLflow: the sweep journals the tag, its writer sets it.
"""

from __future__ import annotations

import json
from typing import Any

from sporeflow.config import objective
from sporeflow.core.names import SWEEP_RUN_ID_TAG, StageKind
from sporeflow.report.sweep_report import GAIN, GAIN_CI, METRIC_COLUMNS

TAG_PREFIX = "mlflow.sharedViewState."
RANK = "sweep/rank"  # a sweep job's place, 1 first: the leader's jobs (report.sweep_report.ranks)
SECTION = "sporeflow-sweep"
SEED_KEYS = ("seed",)
# the metrics a sweep's table shows, in its order, the gain followed by its interval and p-value
DECIDING = tuple(
    key
    for column, _ in METRIC_COLUMNS
    for key in ((column, *GAIN_CI) if column == GAIN else (column,))
)


def column(kind: str, name: str) -> str:
    return f"{kind}.`{name}`"


def share_key(sweep_run_id: str) -> str:
    return f"sweep-{sweep_run_id}"


def _scatter(uuid: str, x: tuple[str, str], y: str, title: str) -> dict[str, Any]:
    return {
        "uuid": uuid,
        "type": "SCATTER",
        "runsCountToCompare": 100,
        "metricSectionId": SECTION,
        "deleted": False,
        "isGenerated": False,
        "displayName": title,
        "xaxis": {"key": x[1], "type": x[0]},
        "yaxis": {"key": y, "type": "METRIC"},
    }


def sweep_view(
    sweep_run_id: str,
    keys: list[str],
    objective_key: str,
    metrics: list[str],
    order_key: str | None = None,
) -> dict[str, Any]:
    """The view state of a sweep whose jobs' runs hold `metrics` (of DECIDING, the others are
    left out), swept over `keys`, ranked by `objective_key`; sorted by `order_key` (ascending:
    RANK, the leader's jobs first) when given, else by the objective."""
    shown = [m for m in DECIDING if m in metrics]
    charts = []
    stage1, stage2 = f"val/{StageKind.stage1}/acc", f"val/{StageKind.stage2}/acc"
    if stage1 in shown and stage2 in shown:
        charts.append(
            _scatter("sf-stage2-vs-stage1", ("METRIC", stage1), stage2, "stage 2 vs stage 1")
        )
    charts += [
        _scatter(f"sf-{key}", ("PARAM", key), objective_key, f"{objective_key} vs {key}")
        for key in keys
    ]
    pipeline = stage2 in shown or f"{StageKind.stage2}/acc" in shown  # or recorded before val/
    grouped = [k for k in keys if k not in SEED_KEYS]
    seeds = any(k in SEED_KEYS for k in keys)
    return {
        "searchFilter": f"tags.`{SWEEP_RUN_ID_TAG}` = '{sweep_run_id}'",
        "orderByKey": column("metrics", order_key or objective_key),
        "orderByAsc": True if order_key else not objective.maximize(objective_key),
        "selectedColumns": [
            *(column("params", k) for k in keys),
            *(column("metrics", m) for m in shown),
            column("attributes", "Dataset"),
            # a plain job's run logged its model; a pipeline's stages did (expand a row)
            *([] if pipeline else [column("attributes", "Models")]),
        ],
        "groupBy": (
            {
                "aggregateFunction": "average",
                "groupByKeys": [{"mode": "param", "groupByData": k} for k in grouped],
            }
            if seeds and grouped
            else None
        ),
        "compareRunCharts": charts,
        "compareRunSections": [
            {
                "uuid": SECTION,
                "name": "sweep",
                "display": True,
                "isReordered": False,
                "deleted": False,
                "isGenerated": False,
            }
        ],
        "isAccordionReordered": True,  # keep our section first; MLflow adds the others after
        "hideEmptyCharts": True,
        "runListHidden": False,
        "viewMaximized": False,
        "useGroupedValuesInCharts": True,
    }


def encode(view: dict[str, Any]) -> str:
    return json.dumps(view, separators=(",", ":"))
