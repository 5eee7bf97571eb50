"""`sporeflow ui` serving the latest sweep's Optuna study in optuna-dashboard, a real server
process: the study is found over HTTP on 127.0.0.1, the dashboard never changes it, and stopping
`sporeflow ui` leaves no child behind. The link logic and the refusal beyond loopback are
tested in process (tests/unit/test_study_dashboard.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from helpers.servers import free_port
from helpers.shell import user_env
from helpers.studies import sweep_parent, told_study

pytestmark = pytest.mark.e2e

SPOREFLOW = str(Path(sys.executable).parent / "sporeflow")


def test_ui_serves_the_sweeps_study_in_optuna_dashboard_and_leaves_no_process(tmp_path):
    storage, sid = told_study(tmp_path, "rho-sigma", trials=3, others=1)
    sweep_parent(tmp_path, {"optuna.study": "rho-sigma", "optuna.storage": storage})
    port, dash = free_port(), free_port()
    ui = subprocess.Popen(
        [SPOREFLOW, "ui", "--port", str(port), "--dashboard-port", str(dash)],
        cwd=tmp_path,
        env=user_env({"MLFLOW_TRACKING_URI": ""}),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        links = {}
        while "dashboard" not in links:  # printed once both servers answer
            line = ui.stdout.readline()
            assert line, f"sporeflow ui ended: {ui.wait(timeout=30)} {ui.stderr.read()[-3000:]}"
            label, _, url = line.strip().rpartition(" ")
            links[label.strip()] = url
        assert links["dashboard"] == f"http://127.0.0.1:{dash}/dashboard/studies/{sid}"
        api = f"http://127.0.0.1:{dash}/api"
        with urllib.request.urlopen(f"{api}/studies", timeout=10) as resp:
            studies = json.load(resp)["study_summaries"]
        (ours,) = [s for s in studies if s["study_name"] == "rho-sigma"]
        assert ours["study_id"] == sid
        with urllib.request.urlopen(f"{api}/studies/{sid}", timeout=10) as resp:
            assert len(json.load(resp)["trials"]) == 3
        with urllib.request.urlopen(links["dashboard"], timeout=10) as page:
            assert page.status == 200  # the single-page app
        delete = urllib.request.Request(f"{api}/studies/{sid}", method="DELETE")
        try:
            urllib.request.urlopen(delete, timeout=10)
            raise AssertionError("the dashboard deleted the study")
        except urllib.error.HTTPError as ex:
            assert ex.code == 405
        started = psutil.Process(ui.pid).children(recursive=True)
        assert any("sporeflow.entry.study_dashboard" in " ".join(p.cmdline()) for p in started)
        for p in started:  # the storage URL is in no process's arguments
            assert storage not in " ".join(p.cmdline()), p.cmdline()
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(timeout=60) == 128 + signal.SIGTERM
        _, alive = psutil.wait_procs(started, timeout=15)
        assert not alive, [p.cmdline() for p in alive]
        said = ui.stderr.read()
        assert "Traceback" not in said and "GET /api" not in said, said[-3000:]
    finally:
        if ui.poll() is None:
            ui.kill()
    import optuna

    study = optuna.load_study(study_name="rho-sigma", storage=storage)
    assert len(study.trials) == 3
