"""The tutorial notebook (docs/tutorial.ipynb) runs top to bottom in a real Jupyter kernel, and
what it shows agrees with the MLflow store read by MLflow's own client. The executed notebook
is written back: the manual renders these outputs, so they are always the current code's."""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat
import pytest
from mlflow.tracking import MlflowClient
from nbclient import NotebookClient

pytestmark = pytest.mark.e2e

NOTEBOOK = Path(__file__).resolve().parents[2] / "docs" / "tutorial.ipynb"


def result_of(cell) -> str:
    """The text of a code cell's value (its execute_result)."""
    (shown,) = [o for o in cell.outputs if o.output_type == "execute_result"]
    return shown.data["text/plain"]


def printed(cell) -> str:
    return "".join(o.text for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def test_the_tutorial_runs_top_to_bottom_and_shows_what_the_store_holds(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(
        notebook,
        timeout=900,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, if any cell raised
    code = [c for c in notebook.cells if c.cell_type == "code"]
    store = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")

    acc, run_id = ast.literal_eval(result_of(code[0]))
    assert store.get_run(run_id).data.metrics["final/val/acc"] == acc
    assert printed(code[1]).startswith("Config error: optimizer.lr='fast': must be a number")
    decision, verdict = printed(code[3]).splitlines()[:2]
    (sweep,) = store.search_runs(
        [store.get_experiment_by_name("sporeflow").experiment_id], "tags.stage = 'sweep'"
    )
    assert decision == sweep.data.tags["sporeflow.decision"] and verdict.startswith(decision)
    assert any(o.output_type == "display_data" and "image/png" in o.data for o in code[4].outputs)
    assert result_of(code[5]) == "True"
    labels, truth = ast.literal_eval(result_of(code[6]))
    assert len(labels) == len(truth) == 12
    nbformat.write(notebook, NOTEBOOK)
