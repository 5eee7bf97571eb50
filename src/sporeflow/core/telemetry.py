"""MLflow 3 sends usage telemetry from every process that imports it (the tracking writer
included). sporeflow's processes keep it off unless the user chose: MLFLOW_DISABLE_TELEMETRY
set either way is respected, and child processes (writers, msrun workers, sweep jobs) inherit
the choice."""

from __future__ import annotations

import os

SWITCH = "MLFLOW_DISABLE_TELEMETRY"


def off_unless_chosen() -> None:
    """Turn MLflow's telemetry off for this process and its children, unless already set."""
    os.environ.setdefault(SWITCH, "true")
