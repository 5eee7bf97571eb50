"""What a team's store costs (issue 23): the default job and a sweep of concurrent jobs tracked
into the one-person sqlite file, straight into PostgreSQL, and through `sporeflow server`
(mlflow server over PostgreSQL, artifacts served). A real PostgreSQL on 127.0.0.1, started and
removed here (tests/helpers/postgres.py: needs root and Debian's postgresql).

  job     `python train.py` (LeNet-5, digits, 10 epochs), arms interleaved, median of N; the
          ratio to sqlite pair by pair. The trainer only appends to its journal whatever the
          store: the difference is the writer's, and what is left of it when the run ends.
  sweep   8 jobs at once under joblib (2 epochs each, no model logged): jobs per minute.
Usage: python bench/bench_team_store.py [repeats]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainjob import REPO, interleaved_wall_times, print_paired

sys.path.insert(0, str(REPO / "tests"))
from helpers.postgres import PASSWORD, PostgresServer
from helpers.servers import free_port, stop, wait_until_healthy


def team_server(db_uri_without_password: str, root: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "sporeflow"),
            "server",
            "--db",
            db_uri_without_password,
            "--artifacts",
            str(root / "artifacts"),
            "--port",
            str(port),
        ],
        env={**os.environ, "PGPASSWORD": PASSWORD},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_healthy(url, proc, timeout=120)
    return proc, url


def sweep_minutes(uri: str | None) -> float:
    """Wall minutes of 8 concurrent 2-epoch jobs (joblib) tracked into `uri` (None: sqlite)."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            str(REPO / "train.py"),
            "-m",
            "hydra/launcher=joblib",
            "hydra.launcher.n_jobs=8",
            "seed=range(1,9)",
            "epochs=2",
            "tracking.log_model=false",
            "callbacks.progress_bar=false",
            f"hydra.sweep.dir={tmp}/multirun",
            *([f"tracking.uri={uri}"] if uri else []),
        ]
        start = time.perf_counter()
        proc = subprocess.run(
            cmd,
            cwd=tmp,
            capture_output=True,
            text=True,
            env={**os.environ, "MLFLOW_TRACKING_URI": ""},
        )
        if proc.returncode:
            raise RuntimeError(proc.stderr[-3000:])
        return (time.perf_counter() - start) / 60


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    pg = PostgresServer().start()
    root = Path(tempfile.mkdtemp())
    server = None
    try:
        direct = pg.new_database("direct")
        pg.new_database("served")
        server, url = team_server(pg.uri("served", password=None), root)
        arms = {
            "sqlite": [],
            "postgresql": [f"tracking.uri={direct}"],
            "server": [f"tracking.uri={url}"],
        }
        times = interleaved_wall_times(arms, repeats)
        print_paired(times, "sqlite", "default job (lenet5-digits, 10 epochs)")
        print("8 concurrent jobs (joblib, 2 epochs each, no model), jobs per minute:")
        for arm, uri in (("sqlite", None), ("server", url)):
            minutes = sweep_minutes(uri)
            print(f"  {arm:10s} {8 / minutes:5.1f} jobs/min  ({minutes * 60:.0f} s for 8)")
    finally:
        if server is not None:
            stop(server)
        pg.stop()


if __name__ == "__main__":
    main()
