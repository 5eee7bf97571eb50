"""The run marker: what a resume (and the launcher closing a run) needs to find a run's MLflow
record again, kept as a small JSON file in the run dir. No MindSpore here, so the launcher's
hooks (stages/runs.py) stay light."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sporeflow.storage.files import write_text_atomic

RUN_MARKER = "sporeflow_run.json"


def write_run_marker(run_dir: Path, **info: Any) -> None:
    """Record what a resume needs to continue this run (MLflow run id, stage) in the run dir."""
    write_text_atomic(Path(run_dir) / RUN_MARKER, json.dumps(info, indent=2))


def read_run_marker(run_dir: Path) -> dict:
    path = Path(run_dir) / RUN_MARKER
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
