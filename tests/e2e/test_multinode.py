"""A real two-node msrun job on one machine: two Linux network namespaces joined by a veth pair
(addresses in 10.213.0.0/16, created and removed by the test), each "node" running
`python train.py parallel=data2 parallel.nodes=2 parallel.node_rank=<r> ...` in a mount
namespace of its own with its launch dir on a private tmpfs, so the nodes share no files - as
separate hosts would not. Needs root (CI runs as root); skipped with the reason otherwise."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from helpers.machine import unavailable
from helpers.train import COMBINED_BATCH, TRAIN

pytestmark = pytest.mark.e2e

PORT = 8118


@dataclass
class Nodes:
    names: list
    addresses: list


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture
def two_nodes():
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        unavailable("two-node tests need root, `ip` and `unshare` (network and mount namespaces)")
    tag = f"{os.getpid() % 100000}"
    names, veths = [f"sf{tag}n0", f"sf{tag}n1"], [f"sf{tag}v0", f"sf{tag}v1"]
    subnet = f"10.213.{os.getpid() % 250 + 1}"
    addresses = [f"{subnet}.1", f"{subnet}.2"]
    steps = [
        ("netns", "add", names[0]),
        ("netns", "add", names[1]),
        ("link", "add", veths[0], "type", "veth", "peer", "name", veths[1]),
    ]
    for ns, veth, address in zip(names, veths, addresses, strict=False):
        steps += [
            ("link", "set", veth, "netns", ns),
            ("-n", ns, "addr", "add", f"{address}/24", "dev", veth),
            ("-n", ns, "link", "set", veth, "up"),
            ("-n", ns, "link", "set", "lo", "up"),
        ]
    for ns in names:  # a namespace an earlier, killed run of this test left behind
        _ip("netns", "del", ns)
    try:
        for step in steps:
            done = _ip(*step)
            if done.returncode != 0:
                unavailable(
                    f"cannot build the two-node network (ip {' '.join(step)}: {done.stderr.strip()})"
                )
        yield Nodes(names, addresses)
    finally:
        for ns in names:
            _ip("netns", "del", ns)  # removes the veth pair with it
        _ip("link", "del", veths[0])


def start_node(
    nodes: Nodes,
    rank: int,
    mount: Path,
    out: Path,
    args: list,
    cluster_time_out: int = 120,
    private_disk: bool = True,
) -> subprocess.Popen:
    """`python train.py` as node `rank`, its launch dir `mount`: a tmpfs only this node sees
    (copied to `out` when it ends, for the checks)."""
    train = [
        sys.executable,
        str(TRAIN),
        f"hydra.run.dir={mount}/run",
        "callbacks.progress_bar=false",
        *args,
        "parallel=data2",
        "parallel.nodes=2",
        f"parallel.node_rank={rank}",
        f"parallel.master_addr={nodes.addresses[0]}",
        f"parallel.master_port={PORT}",
        f"parallel.cluster_time_out={cluster_time_out}",
    ]
    mount.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    script = (
        f"mount -t tmpfs -o size=1g sporeflow-node{rank} {mount} && cd {mount} && "
        if private_disk
        else f"cd {mount} && "
    ) + f"{shlex.join(train)}; rc=$?; cp -a {mount}/. {out}/; exit $rc"
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": "",
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    }
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            nodes.names[rank],
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_two_nodes(nodes: Nodes, tmp_path: Path, args: list) -> list:
    procs = [start_node(nodes, r, tmp_path / "node", tmp_path / f"node{r}", args) for r in (0, 1)]
    outputs = [p.communicate(timeout=900) for p in procs]
    for rank, (proc, (_, err)) in enumerate(zip(procs, outputs, strict=False)):
        assert proc.returncode == 0, f"node {rank}:\n{err[-3000:]}"
    return [err for _, err in outputs]


def weights(path: Path) -> dict:
    return {k: v.asnumpy() for k, v in ms.load_checkpoint(str(path)).items()}


def only_runs(launch_dir: Path) -> list:
    client = MlflowClient(f"sqlite:///{launch_dir / 'mlflow.db'}")
    return client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])


def test_two_nodes_train_one_job_like_one_machine_on_the_combined_batch(
    two_nodes, tmp_path, standalone_on_the_combined_batch
):
    started = time.monotonic()
    errs = run_two_nodes(two_nodes, tmp_path, COMBINED_BATCH)
    print(f"two-node data2 job: {time.monotonic() - started:.1f} s")
    assert "node 1: its workers finished; rank 0 on node 0" in errs[1]
    ranks = [
        weights(tmp_path / "node0" / "run/checkpoints/rank_0/final.ckpt"),
        weights(tmp_path / "node1" / "run/checkpoints/rank_1/final.ckpt"),
    ]
    assert not (tmp_path / "node1" / "run/checkpoints/rank_0").exists(), (
        "each node holds only its own rank"
    )
    alone = standalone_on_the_combined_batch
    assert ranks[0].keys() == alone.keys()
    for key in alone:
        np.testing.assert_array_equal(
            ranks[0][key], ranks[1][key], err_msg=key
        )  # bit-identical across nodes
        np.testing.assert_allclose(ranks[0][key], alone[key], rtol=1e-4, atol=1e-5, err_msg=key)
    (run,) = only_runs(tmp_path / "node0")
    assert run.info.status == "FINISHED" and run.data.params["parallel.nodes"] == "2"
    assert not list((tmp_path / "node1").glob("mlflow.db*")), (
        "node 1 must never open or create a store"
    )


def test_dim_reduce_across_nodes_needs_no_shared_disk(two_nodes, tmp_path):
    """Each node keeps its own snapshots and computes the same PCA basis from them; stage 2's
    weights agree bit for bit across the nodes; node 0 alone tracks the pipeline."""
    small = [
        "+dataset.drop_remainder=true",
        "debug=dim_reduce",
        "boost.baselines=[baseline]",
    ]
    run_two_nodes(two_nodes, tmp_path, small)
    nodes = [tmp_path / "node0" / "run", tmp_path / "node1" / "run"]
    for run_dir in nodes:
        assert (
            len(list((run_dir / "stage1/snapshots").glob("snapshot_*.npy"))) == 12
        )  # (3 - 1 + 1) x 4
    bases = [np.load(next((run_dir / "stage1/pca").glob("pca_k8_*.npy"))) for run_dir in nodes]
    np.testing.assert_array_equal(bases[0], bases[1])
    stage2 = [
        weights(nodes[0] / "stage2/checkpoints/rank_0/final.ckpt"),
        weights(nodes[1] / "stage2/checkpoints/rank_1/final.ckpt"),
    ]
    for key in stage2[0]:
        np.testing.assert_array_equal(stage2[0][key], stage2[1][key], err_msg=key)
    by_stage = {r.data.tags["stage"]: r for r in only_runs(tmp_path / "node0")}
    assert set(by_stage) == {"pipeline", "stage1", "stage2", "baseline"}
    assert all(r.info.status == "FINISHED" for r in by_stage.values())
    assert not list((tmp_path / "node1").glob("mlflow.db*"))


def test_a_node_that_never_arrives_is_named_after_the_cluster_time_out(two_nodes, tmp_path):
    started = time.monotonic()
    proc = start_node(
        two_nodes,
        0,
        tmp_path / "node",
        tmp_path / "node0",
        ["epochs=1"],
        cluster_time_out=15,
        private_disk=False,
    )
    _, err = proc.communicate(timeout=300)
    took = time.monotonic() - started
    print(f"node 0 alone gave up after {took:.1f} s (cluster_time_out=15)")
    assert proc.returncode == 1, err[-3000:]
    assert (
        f"the 2-node job did not form within parallel.cluster_time_out=15 s: node 1 never joined the master "
        f"at {two_nodes.addresses[0]}:{PORT}"
    ) in err
    assert not [r for r in only_runs(tmp_path / "node0") if r.info.status == "RUNNING"]


def test_a_node_that_cannot_reach_the_master_says_so(two_nodes, tmp_path):
    """docs/troubleshooting.md, the other side: node 1 started alone names the master it
    could not join, ends with exit 1 and never opens a store."""
    proc = start_node(
        two_nodes,
        1,
        tmp_path / "node",
        tmp_path / "node1",
        ["epochs=1"],
        cluster_time_out=15,
        private_disk=False,
    )
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 1, err[-3000:]
    assert (
        f"node 1 could not join the master at parallel.master_addr={two_nodes.addresses[0]}:{PORT}"
        in err
    )
    assert not list((tmp_path / "node1").glob("mlflow.db*"))
