"""Process topology: how many workers a config asks for, and re-running this command under
MindSpore's `msrun` when it asks for more than one.

The launcher (the process the user started) does no training: it re-runs the same job
(same overrides, same Hydra run dir) as `msrun --worker_num=N ... train.py`, waits, and on a
worker failure calls the caller's `on_end("FAILED")` (the entry marks the MLflow run FAILED)
and shows the failing rank's last log lines. Nothing here knows about tracking.
Workers recognise themselves by the MS_ROLE variable msrun sets (MS_WORKER; the scheduler
process, MS_SCHED, runs the script up to `init()` too).

A requeue (SLURM's warning, core.signals): msrun and the workers start with SIGUSR2 blocked;
an armed launcher tells its workers so (REQUEUE_ENV) and passes the warning on as a file in the
run dir (`requeue_file`), which every worker looks for at each step (the ranks agree on the
step: engine.callbacks.RequeueAtSignal); rank 0 reports the stop in the result file and the
launcher raises `Requeued` for SLURM's launcher to queue the job again.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from sporeflow.config.facts import first_local_rank
from sporeflow.core import signals
from sporeflow.core.context import RunContext
from sporeflow.core.errors import SporeflowError, TrialPruned
from sporeflow.core.processes import is_running, start_group, stop_group
from sporeflow.core.signals import Interrupted
from sporeflow.launch.logfollow import LogFollower
from sporeflow.storage.files import write_text_atomic
from sporeflow.storage.run_marker import node0_run_dir, resume_off

RESULT_FILE = "sporeflow_result.json"
LOG_DIR = "msrun_logs"
LOG_TAIL = 25
log = logging.getLogger(__name__)
WORKERS_GONE_GRACE = 10.0  # seconds msrun may outlive all of this node's workers
STOP_GRACE = 30.0  # seconds the job's processes get to end their runs after a SIGINT/SIGTERM
REQUEUE_ENV = "SPOREFLOW_REQUEUES_BEFORE"  # set for the workers of an armed launcher
REQUEUE_FILE = "sporeflow_requeue"  # made in the run dir when SLURM warned the launcher
REMOTE_WAIT = 120.0  # seconds a worker of another node waits for rank 0's work at most


def requeue_file(run_dir: Path) -> Path:
    """The file an armed launcher makes when SLURM warns it; its workers stop at its sight."""
    return Path(run_dir) / REQUEUE_FILE


class LaunchError(SporeflowError):
    """msrun or one of its workers failed; the message names the rank and its error."""


def under_msrun() -> bool:
    return os.environ.get("MS_ROLE") in ("MS_WORKER", "MS_SCHED")


def needs_launch(cfg: DictConfig) -> bool:
    return cfg.parallel.workers > 1 and not under_msrun()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def available_cores() -> int:
    return (
        len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    )


def threads_per_worker(local_workers: int, cores: int | None = None) -> int:
    """CPU kernel threads each worker may use so that N workers do not oversubscribe C cores."""
    return max(1, (cores or available_cores()) // max(1, local_workers))


def override(key: str, value: object) -> str:
    """`key=value` as Hydra's override grammar reads it back: the value single-quoted and
    escaped by Hydra's own QuotedString, so a path with a space, '#', '?', '%', '=' or a quote
    (a launch folder named so) is one value, not a parse error."""
    from hydra.core.override_parser.types import Quote, QuotedString

    return f"{key}={QuotedString(text=str(value), quote=Quote.single).with_quotes()}"


def msrun_command(cfg: DictConfig, ctx: RunContext, port: int) -> tuple[list[str], Path]:
    par = cfg.parallel
    local = par.workers // par.nodes
    log_dir = ctx.run_dir / LOG_DIR
    own = ("hydra.run.dir=", "runtime.threads=", "resume=")
    overrides = [o for o in ctx.overrides if not o.startswith(own)]
    if not resume_off(cfg.resume):  # a requeued job's too (entry.app)
        overrides.append(override("resume", cfg.resume))
    threads = cfg.runtime.threads or threads_per_worker(local)
    cmd = [
        "msrun",
        f"--worker_num={par.workers}",
        f"--local_worker_num={local}",
        f"--master_addr={par.master_addr}",
        f"--master_port={port}",
        f"--node_rank={par.node_rank}",
        f"--log_dir={log_dir}",
        "--join=True",
        f"--cluster_time_out={par.cluster_time_out}",
        "--tail_worker_log=-2",  # a rank no worker has: msrun tails no log (LogFollower shows rank 0's)
        str(ctx.entry_script),
        *overrides,
        override("hydra.run.dir", ctx.run_dir),
        f"runtime.threads={threads}",
    ]
    return cmd, log_dir


def record_worker_pid(ctx: RunContext, workers: int) -> None:
    """A worker notes its pid under its rank (msrun's RANK_ID), so that the launcher can name
    the rank behind a pid msrun reports dead."""
    rank = os.environ.get("RANK_ID")
    if os.environ.get("MS_ROLE") == "MS_WORKER" and rank is not None:
        log.info("worker rank %s of %d, pid %d", rank, workers, os.getpid())
        log_dir = ctx.run_dir / LOG_DIR
        log_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(log_dir / f"worker_{rank}.pid", str(os.getpid()))


def end_worker(ctx: RunContext, rank: int, node_rank: int, poll: float = 0.25) -> None:
    """A worker's work is complete (its runs ended, rank 0's result written): it says so beside
    its pid file, then waits until rank 0 has said so too before it exits. msrun stops a node's
    workers as soon as one ends badly, and rank 0 is often still logging its model when the
    others finish: a crash as they exit (in MindSpore's teardown or its cluster's message
    thread: both seen in CI, now and then) took rank 0's work with it. A collective barrier
    cannot wait that long (MindSpore's CPU collectives give up after 30 s). Rank 0's files are in
    node 0's run dir; another node waits when it sees them (a shared disk), at most
    REMOTE_WAIT seconds (it cannot tell a process of another host alive)."""
    write_text_atomic(ctx.run_dir / LOG_DIR / f"worker_{rank}.done", str(os.getpid()))
    if rank == 0:
        return
    rank_0 = node0_run_dir(ctx.run_dir, node_rank) / LOG_DIR
    deadline = time.monotonic() + REMOTE_WAIT
    while not (rank_0 / "worker_0.done").exists():
        try:
            pid = int((rank_0 / "worker_0.pid").read_text())
        except (OSError, ValueError):
            return  # not visible from here: nothing to wait on
        gone = not is_running(pid) if node_rank == 0 else time.monotonic() > deadline
        if gone:  # rank 0 ended (msrun decides), or on another host too slow to wait for
            return
        time.sleep(poll)


def teardown_crash(log_dir: Path, local_workers: int) -> str | None:
    """ "rank 1 (pid 4242) was killed by SIGSEGV" when that happened after every worker of this
    node had marked its work done (`end_worker`): MindSpore crashing in a finished process
    (processes.exit_without_teardown narrows where). The job's results are complete; None
    otherwise."""
    if len(list(log_dir.glob("worker_*.done"))) < local_workers:
        return None
    dead = dead_worker(log_dir)
    return dead if dead and "killed by" in dead else None


def _ended_well(code: int, no_cluster: bool, log_dir: Path, local_workers: int) -> bool:
    """msrun's own verdict, except for a worker killed after every worker of this node had
    finished its work (`teardown_crash`): one warning line, and the job keeps its result."""
    if no_cluster or code == 0:
        return not no_cluster
    crash = teardown_crash(log_dir, local_workers)
    if crash:
        print(
            f"[sporeflow] warning: {crash} after this node's workers had all finished "
            "their work (MindSpore ending the process): the job is complete",
            file=sys.stderr,
        )
    return crash is not None


def dead_worker(log_dir: Path) -> str | None:
    """ "rank 1 (pid 4242) was killed by SIGKILL", from msrun's own log and the workers' pid files."""
    try:
        text = (log_dir / "msrun.log").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"Worker process (\d+) exit with exception\. Error code: (-?\d+)", text)
    if not found:
        return None
    pid, code = int(found.group(1)), int(found.group(2))
    ranks = {int(p.read_text() or -1): p.stem.split("_")[-1] for p in log_dir.glob("worker_*.pid")}
    how = f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with code {code}"
    return f"rank {ranks.get(pid, '?')} (pid {pid}) {how}"


def failing_rank(log_dir: Path) -> tuple[str, list[str]] | None:
    """(log name, last lines) of the first worker log that shows a Python error."""
    for log in sorted(
        log_dir.glob("worker_*.log"), key=lambda p: int(re.sub(r"\D", "", p.name) or 0)
    ):
        lines = log.read_text(errors="replace").splitlines()
        if any(ln.startswith("Traceback") or "Error:" in ln for ln in lines):
            return log.name, lines[-LOG_TAIL:]
    return None


def launch(
    cfg: DictConfig,
    ctx: RunContext,
    before_start: Callable[[], None] = lambda: None,
    on_end: Callable[[str], None] = lambda status: None,
) -> dict[str, Any]:
    """Run the job under msrun; returns what rank 0 left (write_result): `objective` (a float,
    or [accuracy, cost]), and the job's `metrics`, `run_id` and `weights` when it recorded them;
    a node other than node 0 returns `{"objective": nan}` (node 0 reports the job).

    `before_start` runs once before any worker exists; `on_end("FAILED")` when the job failed,
    `on_end("KILLED")` when this launcher was interrupted (SIGINT/SIGTERM: passed on to every
    process of the job). msrun runs in its own process group and dies with this process (a
    parent-death signal); each worker in turn dies with msrun (`signals.die_with_parent`)."""
    executable = msrun_executable()
    par = cfg.parallel
    master_node = par.node_rank == 0  # the node whose rank 0 reports (and owns the MLflow run)
    if master_node:
        before_start()
    port = par.master_port or free_port()
    cmd, log_dir = msrun_command(cfg, ctx, port)
    cmd[0] = executable
    first_rank = first_local_rank(cfg)
    announce(cfg, port, log_dir, first_rank)
    for earlier in (requeue_file(ctx.run_dir), ctx.run_dir / RESULT_FILE):  # a requeued job's
        earlier.unlink(missing_ok=True)
    try:
        proc, no_cluster = run_msrun(cmd, ctx, log_dir, first_rank, par)
    except Interrupted:
        if master_node:
            on_end("KILLED")
        raise
    ended_well = _ended_well(proc.returncode, no_cluster, log_dir, par.workers // par.nodes)
    if not master_node and ended_well:
        done = "stopped for the requeue" if signals.requeue_asked() else "finished"
        print(
            f"[sporeflow] node {par.node_rank}: its workers {done}; rank 0 on node 0 "
            f"({par.master_addr}) reports the results and the MLflow run",
            file=sys.stderr,
        )
        return {"objective": float("nan")}
    result_path = ctx.run_dir / RESULT_FILE
    if not ended_well or not result_path.is_file():
        if master_node:
            on_end("FAILED")
        raise LaunchError(failure_message(cfg, port, log_dir, proc.returncode, no_cluster))
    result = json.loads(result_path.read_text())
    if result.get("pruned"):  # the workers stopped together; their runs already say why
        raise TrialPruned(result["pruned"])
    if result.get("requeued"):  # the same: every rank checkpointed at one step, runs left open
        raise signals.Requeued(signal.SIGUSR2, int(result["requeued"]))
    found = result.get("objective", float("nan"))
    objective = [float(v) for v in found] if isinstance(found, list) else float(found)
    return {**result, "objective": objective}


def msrun_executable() -> str:
    """msrun, installed beside this Python (the virtualenv's bin/), on PATH or not."""
    found = shutil.which(
        "msrun", path=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    )
    if found is None:
        raise LaunchError(
            f"msrun is neither beside {sys.executable} nor on PATH: install MindSpore "
            "into this Python's environment"
        )
    return found


def msrun_env(threads: str) -> dict:
    """The workers' environment: this Python first on PATH (msrun runs `python`), one OpenMP
    thread pool per worker's share of the cores, MindSpore's C++ log at errors only."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("OMP_NUM_THREADS", threads)
    env.setdefault("GLOG_v", "3")
    return env


def announce(cfg: DictConfig, port: int, log_dir: Path, first_rank: int) -> None:
    """What starts where, and a note when this node's workers outnumber its cores."""
    par = cfg.parallel
    local, cores = par.workers // par.nodes, available_cores()
    where = (
        f" (node {par.node_rank} of {par.nodes}, master {par.master_addr}:{port})"
        if par.nodes > 1
        else ""
    )
    print(
        f"[sporeflow] launching {local} of {par.workers} workers with msrun{where}; console: "
        f"rank {first_rank}; every rank's log in {log_dir}",
        file=sys.stderr,
    )
    if local <= cores:
        return
    batch = cfg.dataset.batch_size
    same = (
        f"each worker takes dataset.batch_size={batch} (parallel.per_worker_batch=true): the "
        f"global batch is {batch * par.workers}"
        if par.per_worker_batch
        else f"the global batch dataset.batch_size={batch} is split across the workers: the "
        "same updates as stand-alone where the training split divides by it, not in each "
        "epoch's last, partial batch (docs/parallel.md)"
    )
    print(
        f"[sporeflow] note: {local} workers share {cores} CPU cores here, so they take turns "
        f"and this job runs slower than stand-alone; {same}",
        file=sys.stderr,
    )


def run_msrun(cmd: list[str], ctx: RunContext, log_dir: Path, first_rank: int, par) -> tuple:
    """Start msrun in its own process group, show the first local rank's log, wait: (the
    finished process, whether a multi-node cluster never formed). Interrupted: every process
    of the job gets the signal and STOP_GRACE seconds, then Interrupted goes on."""
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in [*log_dir.glob("worker_*.pid"), *log_dir.glob("worker_*.done")]:
        stale.unlink()  # an earlier launch's: its workers are gone
    env = msrun_env(cmd[-1].split("=", 1)[1])
    if signals.requeue_armed():
        env[REQUEUE_ENV] = str(signals.requeues_before())
    with (
        open(log_dir / "msrun.log", "w") as msrun_log,
        LogFollower(log_dir / f"worker_{first_rank}.log"),
    ):
        with signals.kept_from_children(signal.SIGUSR2):  # SLURM's warning is the launcher's
            proc = start_group(
                cmd, cwd=ctx.launch_dir, env=env, stdout=msrun_log, stderr=subprocess.STDOUT
            )
        try:
            local = par.workers // par.nodes
            no_cluster = wait_for_job(
                proc,
                log_dir,
                par.nodes > 1,
                par.cluster_time_out + 60,
                local,
                on_poll=lambda: pass_on_a_warning(ctx.run_dir),
            )
        except Interrupted as ex:
            stop_group(proc, ex.signum, STOP_GRACE)
            raise
    return proc, no_cluster


def failure_message(cfg: DictConfig, port: int, log_dir: Path, code: int, no_cluster: bool) -> str:
    """Why the job failed, as specifically as the logs tell: the cluster that never formed,
    the rank whose log shows a Python error, the worker that was killed, or msrun's code."""
    if no_cluster:
        return cluster_not_formed(cfg, port, log_dir)
    failed = failing_rank(log_dir)
    if failed:
        name, tail = failed
        return f"msrun exited with {code}; {name} failed:\n" + "\n".join(tail)
    dead = dead_worker(log_dir)
    if dead:
        return f"{dead}; msrun stopped the other workers (logs in {log_dir})"
    return f"msrun exited with {code} and no worker log shows why; see {log_dir}"


# What msrun's scheduler and workers log when the nodes of a job never all connect
CLUSTER_FAILED = (
    "Building networking for MS_SCHED failed",
    "Failed to initialize distributed job cluster",
)


def _cluster_failed(log_dir: Path) -> bool:
    for log_file in [log_dir / "scheduler.log", *log_dir.glob("worker_*.log")]:
        try:
            text = log_file.read_text(errors="replace")
        except OSError:
            continue
        if any(marker in text for marker in CLUSTER_FAILED):
            return True
    return False


def wait_for_job(
    proc: subprocess.Popen,
    log_dir: Path,
    multi_node: bool,
    forming: float,
    local_workers: int,
    poll: float = 1.0,
    on_poll: Callable[[], None] = lambda: None,
) -> bool:
    """Wait for msrun; True when a multi-node job's cluster never formed - then the job is
    stopped at once instead of after msrun's own heartbeat time-outs. The logs are read only
    while the cluster may still be forming (`forming` seconds), not for the whole job. A job
    whose workers have all ended while msrun (its scheduler waiting for them) lives on is
    stopped after WORKERS_GONE_GRACE seconds, not after msrun's minutes of time-outs."""
    deadline = time.monotonic() + forming
    gone_since: float | None = None
    while True:
        try:
            proc.wait(timeout=poll)
            break
        except subprocess.TimeoutExpired:
            pass
        on_poll()
        if multi_node and time.monotonic() < deadline and _cluster_failed(log_dir):
            stop_group(proc, signal.SIGTERM, STOP_GRACE)
            return True
        if not _workers_all_ended(log_dir, local_workers):
            gone_since = None
        elif gone_since is None:
            gone_since = time.monotonic()
        elif time.monotonic() - gone_since > WORKERS_GONE_GRACE:
            log.warning("every worker of this node has ended but msrun has not: stopping it")
            stop_group(proc, signal.SIGTERM, STOP_GRACE)
            break
    return multi_node and _cluster_failed(log_dir)


def _workers_all_ended(log_dir: Path, local_workers: int) -> bool:
    """Every worker of this node recorded its pid (record_worker_pid), and none of them runs."""
    pids = []
    for path in log_dir.glob("worker_*.pid"):
        try:
            pids.append(int(path.read_text()))
        except (OSError, ValueError):
            return False
    if len(pids) < local_workers:
        return False
    return not any(is_running(pid) for pid in pids)


def cluster_not_formed(cfg: DictConfig, port: int, log_dir: Path) -> str:
    """Which node is missing, from where this launcher stands."""
    par = cfg.parallel
    address = f"{par.master_addr}:{port}"
    if par.node_rank == 0:
        others = "node 1" if par.nodes == 2 else f"one or more of nodes 1..{par.nodes - 1}"
        return (
            f"the {par.nodes}-node job did not form within parallel.cluster_time_out={par.cluster_time_out} s: "
            f"{others} never joined the master at {address}. Start the same command there with "
            f"parallel.node_rank=<its number>, and check that it can reach {address} (logs in {log_dir})"
        )
    return (
        f"node {par.node_rank} could not join the master at parallel.master_addr={address} within "
        f"parallel.cluster_time_out={par.cluster_time_out} s: is node 0 running the same command, and is "
        f"{address} reachable from this node? (logs in {log_dir})"
    )


def write_result(
    ctx: RunContext,
    objective: float | list[float],
    pruned: str = "",
    requeued: int = 0,
    **outcome: Any,
) -> None:
    """Rank 0 tells the launcher how the job ended (the launcher has no MindSpore state): its
    objective (and `outcome`: the job's metrics, run id, weights, each when given), why the
    sweep's pruner stopped it, or that it stopped for requeue `requeued`."""
    given = {key: value for key, value in outcome.items() if value}
    result = {"pruned": pruned} if pruned else {"objective": objective, **given}
    if requeued:
        result = {"requeued": requeued}
    write_text_atomic(ctx.run_dir / RESULT_FILE, json.dumps(result))


def pass_on_a_warning(run_dir: Path) -> None:
    """SLURM warned this (armed) launcher: its workers see it as a file (module docstring)."""
    if signals.requeue_asked() and not requeue_file(run_dir).exists():
        log.info("SLURM's warning before the time limit: the workers stop at their next step")
        write_text_atomic(requeue_file(run_dir), "")
