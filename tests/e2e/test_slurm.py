"""The `cluster=slurm` preset without a scheduler (fast, no root): the sbatch script submitit
writes for it, and the msrun command each node's task would run, with SLURM's environment
variables set by the test (fake_slurm_env). The same preset under a real SLURM cluster (two
nodes in network namespaces, root): tests/e2e/test_slurm_cluster.py."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from sporeflow.config.validation import validate
from sporeflow.core.context import RunContext
from sporeflow.launch.msrun import msrun_command

SLURM_JOB = ["cluster=slurm", "parallel=data8", "parallel.nodes=2", "hydra.launcher.partition=cpu"]


@pytest.fixture
def fake_slurm_env(monkeypatch):
    """What SLURM exports to the task on the second node of a 2-node job."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "cpu[07-08]")
    monkeypatch.setenv("SLURM_NODEID", "1")


def compose_with_hydra(overrides):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from helpers.train import CONF
    from sporeflow.entry.hydra_setup import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="train", overrides=overrides, return_hydra_config=True)


def without_hydra(cfg):
    """The task function's view: Hydra's own node removed (as Hydra does before calling it)."""
    from omegaconf import open_dict

    cfg = cfg.copy()
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def sbatch_script(tmp_path, monkeypatch, *overrides: str) -> str:
    """The sbatch script sporeflow's SlurmLauncher (built from the preset as Hydra builds it)
    would submit. submitit's SlurmExecutor insists on an `srun` on PATH before it writes one:
    a fake one; nothing is submitted."""
    from hydra.utils import instantiate

    fake_bin = tmp_path / "bin"
    fake_bin.mkdir(parents=True)
    (fake_bin / "srun").write_text("#!/bin/sh\nexit 0\n")
    (fake_bin / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:{os.environ['PATH']}")
    cfg = compose_with_hydra([*SLURM_JOB, f"hydra.sweep.dir={tmp_path}/multirun", *overrides])
    executor = instantiate(cfg.hydra.launcher)._executor()._executor
    return executor._make_submission_file_text(executor._submitit_command_str, "uid")


def test_slurm_preset_asks_for_one_task_per_node_with_a_fake_srun(tmp_path, monkeypatch):
    script = sbatch_script(tmp_path, monkeypatch)
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=8",
        "#SBATCH --partition=cpu",
        "#SBATCH --time=120",
        "#SBATCH --signal=USR2@120",
    ):
        assert line in script, script
    assert "srun" in script  # one task per node, each a sporeflow launcher
    assert "--requeue" not in script  # only with hydra.launcher.max_num_timeout > 0
    assert "#SBATCH --requeue" in sbatch_script(
        tmp_path / "requeue", monkeypatch, "parallel=standalone", "hydra.launcher.max_num_timeout=1"
    )


def test_a_task_warned_while_python_still_starts_lives_on(tmp_path, monkeypatch):
    """SLURM's warning (SIGUSR2, up to a minute before `signal_delay_s`) can reach a task before
    any handler is set; its default action kills the task (CI, stop 44: a two-minute limit's
    job died starting). The srun line starts Python with the signal ignored: a Python that
    sends itself SIGUSR2 as its first act lives on, where a plain one dies of it."""
    (srun_line,) = [
        line
        for line in sbatch_script(tmp_path, monkeypatch).splitlines()
        if line.startswith("srun ")
    ]
    assert " sh -c " in srun_line, srun_line
    python = srun_line[srun_line.index(" sh -c ") : srun_line.index(" -u -m submitit")]
    first_act = "import os, signal; os.kill(os.getpid(), signal.SIGUSR2); print('alive')"
    started = subprocess.run(
        f"{python} -c {shlex.quote(first_act)}", shell=True, capture_output=True, text=True
    )
    assert (started.returncode, started.stdout) == (0, "alive\n"), started.stderr
    plain = subprocess.run([sys.executable, "-c", first_act], capture_output=True)
    assert plain.returncode == -signal.SIGUSR2


def test_each_node_task_runs_msrun_for_its_own_workers(fake_slurm_env, tmp_path):
    cfg = compose_with_hydra(SLURM_JOB)
    OmegaConf.update(cfg, "hydra.job.num", 3)  # what Hydra sets for the job
    assert cfg.hydra.sweep.subdir == "3_node1"  # nodes sharing a filesystem never share a run dir
    plain = validate(without_hydra(cfg))
    ctx = RunContext(
        run_dir=tmp_path / "run",
        launch_dir=tmp_path,
        overrides=SLURM_JOB,
        entry_script=Path("train.py"),
    )
    cmd, _ = msrun_command(plain, ctx, plain.parallel.master_port)
    for arg in (
        "--worker_num=8",
        "--local_worker_num=4",
        "--node_rank=1",
        "--master_addr=cpu07",
        "--master_port=24242",  # 20000 + job id 4242: two jobs sharing a node do not clash
    ):
        assert arg in cmd, cmd


def test_outside_slurm_the_preset_is_a_single_node(tmp_path):
    plain = validate(without_hydra(compose_with_hydra(["cluster=slurm", "parallel=data2"])))
    assert plain.parallel.node_rank == 0 and plain.parallel.master_addr == "127.0.0.1"
