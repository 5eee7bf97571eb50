"""What SLURM costs a sweep (issue 24): the same two two-node data2 jobs (seed=1,2), run on the
real two-node cluster of scripts/slurm-two-nodes.sh, (a) as `python train.py -m cluster=slurm`
(submitit -> sbatch -> srun -> one launcher per node -> msrun) and (b) by hand: each job's two
node processes started directly on node0 and node1 (parallel.node_rank, master_addr), both jobs
at once as SLURM runs them. Both track into one MLflow server on node0. Also: the cluster's
set-up time (`up`: network namespaces, MariaDB, slurmdbd, slurmctld, two slurmd, both idle).
Needs root and Debian's slurm-wlm, slurmdbd, munge, mariadb-server.

Usage: python bench/bench_slurm.py [EPOCHS ...]   (default: 2 10; two runs of each arm)
"""

from __future__ import annotations

import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from trainjob import REPO

SCRIPT = REPO / "scripts" / "slurm-two-nodes.sh"
NODE0 = "10.77.0.1"
JOB = [
    "parallel=data2",
    "parallel.nodes=2",
    "+dataset.drop_remainder=true",
    "dataset.batch_size=32",
]
PYTHON = [f"PATH={Path(sys.executable).parent}:{os.environ['PATH']}", sys.executable]


def on_node(root: Path, node: int, *cmd: str, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [str(SCRIPT), "run", str(root), f"--node={node}", "--", "env", *cmd],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        **kwargs,
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def by_slurm(root: Path, launch: Path, server: str, epochs: int) -> float:
    started = time.monotonic()
    proc = on_node(
        root,
        0,
        *PYTHON,
        str(REPO / "train.py"),
        "-m",
        "cluster=slurm",
        *JOB,
        f"epochs={epochs}",
        "seed=1,2",
        "hydra.launcher.cpus_per_task=1",
        "hydra.launcher.partition=debug",
        f"tracking.uri={server}",
        "callbacks.progress_bar=false",
        f"hydra.sweep.dir={launch / 'multirun'}",
        cwd=launch,
    )
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    return time.monotonic() - started


def by_hand(root: Path, launch: Path, server: str, epochs: int) -> float:
    started = time.monotonic()
    procs = []
    for seed, port in ((1, 21001), (2, 21002)):
        for node in (0, 1):
            procs.append(
                on_node(
                    root,
                    node,
                    *PYTHON,
                    str(REPO / "train.py"),
                    *JOB,
                    f"epochs={epochs}",
                    f"seed={seed}",
                    f"parallel.node_rank={node}",
                    f"parallel.master_addr={NODE0}",
                    f"parallel.master_port={port}",
                    f"tracking.uri={server}",
                    "callbacks.progress_bar=false",
                    f"hydra.run.dir={launch / f'seed{seed}_node{node}'}",
                    cwd=launch,
                )
            )
    for proc in procs:
        _, err = proc.communicate()
        assert proc.returncode == 0, err[-3000:]
    return time.monotonic() - started


def main() -> None:
    epochs_list = [int(a) for a in sys.argv[1:]] or [2, 10]
    needed = ["slurmctld", "slurmd", "slurmdbd", "mariadbd", "munged", "ip", "unshare"]
    if os.geteuid() != 0 or not all(shutil.which(tool) for tool in needed):
        print(f"bench_slurm: not run: needs root and {', '.join(needed)}")  # make bench goes on
        return
    root = Path(tempfile.mkdtemp(prefix="bench_slurm_"))
    started = time.monotonic()
    subprocess.run([str(SCRIPT), "up", str(root)], check=True, capture_output=True)
    setup = time.monotonic() - started
    port = free_port()
    server = subprocess.Popen(
        [str(SCRIPT), "server", str(root), "--", str(port)],
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    url = f"http://{NODE0}:{port}"
    try:
        while (
            subprocess.run(
                [str(SCRIPT), "run", str(root), "--", "curl", "-sf", f"{url}/health"],
                capture_output=True,
                text=True,
            ).stdout
            != "OK"
        ):
            time.sleep(1)
        print(f"cluster set-up (up, both nodes idle): {setup:.1f} s")
        print("two two-node data2 jobs (seed=1,2), wall seconds per sweep")
        print(f"{'epochs':>6}  {'by hand':>16}  {'cluster=slurm':>16}  {'ratio':>6}")
        for epochs in epochs_list:
            times: dict[str, list[float]] = {"hand": [], "slurm": []}
            for repeat in range(2):
                for arm, fn in (("hand", by_hand), ("slurm", by_slurm)):
                    launch = root / f"{arm}_{epochs}_{repeat}"
                    launch.mkdir()
                    times[arm].append(fn(root, launch, url, epochs))
            hand, slurm = statistics.mean(times["hand"]), statistics.mean(times["slurm"])
            shown = {a: "/".join(f"{t:.1f}" for t in ts) for a, ts in times.items()}
            print(
                f"{epochs:>6}  {shown['hand']:>16}  {shown['slurm']:>16}  {slurm / hand:>5.2f}x",
                flush=True,
            )
    finally:
        os.killpg(server.pid, 15)
        subprocess.run([str(SCRIPT), "down", str(root)], capture_output=True)


if __name__ == "__main__":
    main()
