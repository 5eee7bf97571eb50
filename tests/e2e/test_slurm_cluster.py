"""`cluster=slurm` under a real scheduler (issue 24): Debian's slurm-wlm and munge, two compute
nodes as two network namespaces on this machine (scripts/slurm-two-nodes.sh, which a user can
run to try the preset), slurmctld beside node0's slurmd, an MLflow server both nodes reach on
node0's address. The sweep is submitted from node0 through submitit_slurm: each job is one
sbatch job over both nodes, one task per node, each task a sporeflow launcher running msrun for
its node's worker. Needs root; skipped with the reason otherwise."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from helpers.machine import unavailable
from helpers.servers import free_port
from helpers.store import by_stage
from helpers.train import COMBINED_BATCH, REPO, TRAIN

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SCRIPT = REPO / "scripts" / "slurm-two-nodes.sh"
NODE0 = "10.77.0.1"


class Cluster:
    def __init__(self, root: Path, server: str, store: Path):
        self.root, self.server, self.store = root, server, store

    def on_node0(self, *cmd: str, **kwargs) -> subprocess.CompletedProcess:
        """COMMAND run on node0 (its network and hostname), where sbatch and squeue work."""
        return subprocess.run(
            [str(SCRIPT), "run", str(self.root), "--", *cmd],
            capture_output=True,
            text=True,
            **kwargs,
        )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """Two idle SLURM nodes and an MLflow server on node0 (sqlite on the shared disk)."""
    needed = ["ip", "unshare", "slurmctld", "slurmd", "munged", "sinfo"]
    if os.geteuid() != 0 or not all(shutil.which(c) for c in needed):
        unavailable(f"the SLURM cluster needs root and {', '.join(needed)} (Debian's slurm-wlm)")
    root = tmp_path_factory.mktemp("slurm")
    started = time.monotonic()
    up = subprocess.run([str(SCRIPT), "up", str(root)], capture_output=True, text=True)
    assert up.returncode == 0, up.stdout + up.stderr
    print(f"SLURM cluster up in {time.monotonic() - started:.1f} s")
    port = free_port()
    store = root / "mlflow.db"
    server = subprocess.Popen(
        [
            str(SCRIPT),
            "run",
            str(root),
            "--",
            str(Path(sys.executable).parent / "mlflow"),
            "server",
            "--backend-store-uri",
            f"sqlite:///{store}",
            "--artifacts-destination",
            str(root / "artifacts"),
            "--serve-artifacts",
            "--host",
            NODE0,
            "--port",
            str(port),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    found = Cluster(root, f"http://{NODE0}:{port}", store)
    try:
        deadline = time.monotonic() + 120
        while found.on_node0("curl", "-sf", f"{found.server}/health").stdout != "OK":
            assert time.monotonic() < deadline and server.poll() is None, "no MLflow server"
            time.sleep(1)
        yield found
    finally:
        os.killpg(server.pid, 15)
        server.wait()
        subprocess.run([str(SCRIPT), "down", str(root)], capture_output=True)


def weights(path: Path) -> dict:
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


def test_the_preset_runs_a_two_node_sweep_under_slurm(
    cluster, tmp_path, standalone_on_the_combined_batch
):
    """Two sbatch jobs (seed=1,2), each on both nodes under srun: both FINISHED in the server,
    and job 0's weights (seed 1) equal a stand-alone run on the combined batch."""
    started = time.monotonic()
    proc = cluster.on_node0(
        "env",
        f"PATH={Path(sys.executable).parent}:{os.environ['PATH']}",
        sys.executable,
        str(TRAIN),
        "-m",
        "cluster=slurm",
        "parallel=data2",
        "parallel.nodes=2",
        "seed=1,2",
        *COMBINED_BATCH,
        "hydra.launcher.cpus_per_task=1",  # SLURM's count; the workers' threads are sporeflow's
        "hydra.launcher.partition=debug",
        f"tracking.uri={cluster.server}",
        "callbacks.progress_bar=false",
        f"hydra.sweep.dir={tmp_path / 'multirun'}",
        cwd=tmp_path,
        timeout=900,
    )
    print(f"two-job sweep under SLURM: {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    client = MlflowClient(f"sqlite:///{cluster.store}")
    experiment = client.get_experiment_by_name("sporeflow").experiment_id
    runs = client.search_runs([experiment], max_results=100)
    stages = by_stage(runs)
    (parent,) = stages["sweep"]
    assert parent.info.status == "FINISHED"
    jobs = {int(r.data.tags["sweep.job"]): r for r in stages["train"]}
    assert sorted(jobs) == [0, 1]
    for job in jobs.values():
        assert job.info.status == "FINISHED" and job.data.tags["batch.workers"] == "2"
        assert job.data.tags["mlflow.parentRunId"] == parent.info.run_id
        assert job.data.params["parallel.nodes"] == "2"
    # each job ran on both nodes, each node's task its own launcher (node 1: <job>_node1)
    for job in (0, 1):
        assert (tmp_path / "multirun" / str(job) / "checkpoints" / "rank_0").is_dir()
        assert (tmp_path / "multirun" / f"{job}_node1" / "checkpoints" / "rank_1").is_dir()
    # submitit submitted one job array of two tasks; what the scheduler says of them
    folders = sorted(p.name for p in (tmp_path / "multirun" / ".submitit").iterdir())
    tasks = [name for name in folders if re.fullmatch(r"\d+_\d+", name)]
    assert len(tasks) == 2, folders
    shown = cluster.on_node0("scontrol", "show", "job", tasks[0].split("_")[0]).stdout
    assert shown.count("JobState=COMPLETED") == 2, shown
    assert shown.count("NumNodes=2 ") == 2 and shown.count("NodeList=node[0-1]") == 2, shown
    alone = standalone_on_the_combined_batch
    ranks = [
        weights(tmp_path / "multirun" / "0" / "checkpoints" / "rank_0" / "final.ckpt"),
        weights(tmp_path / "multirun" / "0_node1" / "checkpoints" / "rank_1" / "final.ckpt"),
    ]
    for key in alone:
        np.testing.assert_array_equal(ranks[0][key], ranks[1][key], err_msg=key)
        np.testing.assert_allclose(ranks[0][key], alone[key], rtol=1e-4, atol=1e-5, err_msg=key)
