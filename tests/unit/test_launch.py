"""launch/ in this process: msrun's command line, what the launcher says when a job fails
(from real log files in msrun's formats), waiting on a real process group, and SLURM's
account of a job it ended (from sacct's own row format)."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from helpers.inprocess import context
from sporeflow.config.validation import validate
from sporeflow.core.processes import start_group
from sporeflow.launch import msrun, slurm
from sporeflow.launch.logfollow import LogFollower


def test_the_msrun_command_reruns_the_job_with_its_own_overrides(compose_cfg, tmp_path):
    cfg = validate(compose_cfg(["parallel=data2", "epochs=2"]))
    overrides = ["parallel=data2", "hydra.run.dir=elsewhere", "runtime.threads=7", "epochs=2"]
    ctx = context(tmp_path, overrides)
    cmd, log_dir = msrun.msrun_command(cfg, ctx, port=29555)
    assert log_dir == ctx.run_dir / msrun.LOG_DIR
    threads = cfg.runtime.threads or msrun.threads_per_worker(2)
    assert cmd[:9] == [
        "msrun",
        "--worker_num=2",
        "--local_worker_num=2",
        f"--master_addr={cfg.parallel.master_addr}",
        "--master_port=29555",
        "--node_rank=0",
        f"--log_dir={log_dir}",
        "--join=True",
        f"--cluster_time_out={cfg.parallel.cluster_time_out}",
    ]
    # the job's own overrides, less the run dir and threads the launcher sets itself
    assert cmd[10:] == [
        str(ctx.entry_script),
        "parallel=data2",
        "epochs=2",
        f"hydra.run.dir='{ctx.run_dir}'",  # quoted for Hydra's parser (a space in the path)
        f"runtime.threads={threads}",
    ]


@pytest.mark.parametrize("workers,cores,threads", [(2, 2, 1), (4, 2, 1), (2, 8, 4), (1, 3, 3)])
def test_threads_per_worker_shares_the_cores(workers, cores, threads):
    assert msrun.threads_per_worker(workers, cores) == threads


def write_logs(log_dir, worker_logs: dict, msrun_log: str = "", pids: dict | None = None):
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / "msrun.log").write_text(msrun_log)
    for rank, text in worker_logs.items():
        (log_dir / f"worker_{rank}.log").write_text(text)
    for rank, pid in (pids or {}).items():
        (log_dir / f"worker_{rank}.pid").write_text(str(pid))


def test_a_failure_names_the_rank_whose_log_shows_the_error(compose_cfg, tmp_path):
    cfg = validate(compose_cfg(["parallel=data2"]))
    error = ["step 1", "Traceback (most recent call last):", '  File "x.py"', "ValueError: boom"]
    write_logs(tmp_path, {0: "training\nfine\n", 10: "\n".join(error), 2: "RuntimeError: later"})
    said = msrun.failure_message(cfg, 1, tmp_path, 1, no_cluster=False)
    # ranks in numeric order (worker_2 before worker_10), the first with a Python error
    assert said == "msrun exited with 1; worker_2.log failed:\nRuntimeError: later"


def test_a_killed_worker_is_named_by_its_rank_and_signal(compose_cfg, tmp_path):
    cfg = validate(compose_cfg(["parallel=data2"]))
    write_logs(
        tmp_path,
        {0: "training\n", 1: "training\n"},
        msrun_log="... Worker process 4242 exit with exception. Error code: -9\n",
        pids={0: 4241, 1: 4242},
    )
    said = msrun.failure_message(cfg, 1, tmp_path, 1, no_cluster=False)
    assert (
        said
        == f"rank 1 (pid 4242) was killed by SIGKILL; msrun stopped the other workers (logs in {tmp_path})"
    )
    write_logs(tmp_path, {0: "", 1: ""}, msrun_log="nothing to see\n")
    assert msrun.failure_message(cfg, 1, tmp_path, 3, False).startswith(
        "msrun exited with 3 and no"
    )


@pytest.mark.parametrize(
    "done,code,crash",
    [
        ((0, 1), -11, "rank 1 (pid 4242) was killed by SIGSEGV"),
        ((0,), -11, None),  # rank 1 had not finished: its crash lost work
        ((0, 1), 1, None),  # an exit code, not a signal: the worker's own doing
    ],
)
def test_a_worker_killed_after_every_worker_finished_is_a_teardown_crash(
    tmp_path, done, code, crash
):
    write_logs(
        tmp_path,
        {0: "training\n", 1: "training\n"},
        msrun_log=f"... Worker process 4242 exit with exception. Error code: {code}\n",
        pids={0: 4241, 1: 4242},
    )
    for rank in done:
        (tmp_path / f"worker_{rank}.done").write_text("")
    assert msrun.teardown_crash(tmp_path, local_workers=2) == crash


def waiting_worker(ctx, rank: int, node_rank: int):
    """end_worker of `rank` on `node_rank` in a thread; (thread, its run dir's log dir)."""
    import threading

    waiting = threading.Thread(target=msrun.end_worker, args=(ctx, rank, node_rank, 0.05))
    waiting.start()
    return waiting, ctx.run_dir / msrun.LOG_DIR


@pytest.fixture
def rank_0_of(tmp_path):
    """A live process standing for rank 0, its pid file in `run_dir`'s msrun log dir."""
    live = subprocess.Popen(["sleep", "60"])

    def rank_0(run_dir):
        (run_dir / msrun.LOG_DIR).mkdir(parents=True, exist_ok=True)
        (run_dir / msrun.LOG_DIR / "worker_0.pid").write_text(str(live.pid))
        return run_dir / msrun.LOG_DIR

    yield rank_0
    live.kill()
    live.wait()


def test_a_worker_of_node_0_ends_only_after_rank_0_has_done_its_work(
    tmp_path, rank_0_of, monkeypatch
):
    """Rank 1 waits (its own work marked done) while a live rank 0 is unfinished - past
    REMOTE_WAIT, the bound only for other hosts - and ends at rank 0's mark; rank 0 itself
    does not wait."""
    monkeypatch.setattr(msrun, "REMOTE_WAIT", 0.1)
    ctx = context(tmp_path, ["parallel=data2"])
    rank_0_of(ctx.run_dir)
    waiting, log_dir = waiting_worker(ctx, 1, 0)
    waiting.join(0.5)
    assert waiting.is_alive() and (log_dir / "worker_1.done").is_file()
    msrun.end_worker(ctx, 0, node_rank=0)  # rank 0 marks its work done ...
    waiting.join(5)
    assert not waiting.is_alive()  # ... and rank 1 ends


def test_a_worker_does_not_wait_for_a_rank_0_that_is_gone(tmp_path):
    ctx = context(tmp_path, ["parallel=data2"])
    log_dir = ctx.run_dir / msrun.LOG_DIR
    log_dir.mkdir(parents=True)
    gone = subprocess.Popen(["true"])
    gone.wait()  # a rank 0 that ended without marking its work done (it crashed)
    (log_dir / "worker_0.pid").write_text(str(gone.pid))
    msrun.end_worker(ctx, 1, node_rank=0, poll=0.05)  # returns: rank 0 crashed, msrun decides
    assert (log_dir / "worker_1.done").is_file() and not (log_dir / "worker_0.done").exists()


def test_another_nodes_worker_waits_for_rank_0_in_node_0s_run_dir_at_most_a_while(
    tmp_path, rank_0_of, monkeypatch
):
    """SLURM's node 1 writes into <job>_node1 and finds rank 0's files in <job> (a shared
    disk); without them it ends at once; it cannot tell a remote rank 0 alive, so it waits at
    most REMOTE_WAIT seconds."""
    node_0 = rank_0_of(tmp_path / "job")
    node_1 = context(tmp_path, ["parallel=data2"], run="job_node1")
    waiting, _ = waiting_worker(node_1, 3, 1)
    waiting.join(0.5)
    assert waiting.is_alive()
    (node_0 / "worker_0.done").write_text("")
    waiting.join(5)
    assert not waiting.is_alive()
    apart = context(tmp_path, ["parallel=data2"], run="elsewhere_node1")
    msrun.end_worker(apart, 3, node_rank=1)  # no node 0 files to see: no wait
    (node_0 / "worker_0.done").unlink()
    monkeypatch.setattr(msrun, "REMOTE_WAIT", 0.3)
    started = time.monotonic()
    msrun.end_worker(node_1, 3, node_rank=1, poll=0.05)
    assert time.monotonic() - started >= 0.3


def test_exit_without_teardown_runs_the_atexit_handlers_and_not_the_teardown(tmp_path):
    """A real interpreter: its threads end and the atexit handlers (MindSpore's cluster exit
    among them in a worker) run, the teardown (a module global's __del__) does not, the code
    is kept."""
    script = (
        "import atexit, sys, threading, time\n"
        "from sporeflow.core.processes import exit_without_teardown\n"
        "class Torn:\n"
        "    def __del__(self):\n"
        "        print('teardown', flush=True)\n"
        "kept = Torn()\n"
        "atexit.register(lambda: print('atexit', flush=True))\n"
        "print('buffered', end='')\n"
        "threading.Thread(target=lambda: (time.sleep(0.3), print('thread', end=''))).start()\n"
        "exit_without_teardown(3)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "bufferedthreadatexit\n"
    plain = subprocess.run(  # the same without it: the teardown runs the __del__
        [sys.executable, "-c", script.replace("exit_without_teardown(3)", "pass")],
        capture_output=True,
        text=True,
    )
    assert plain.stdout == "bufferedthreadatexit\nteardown\n"


def test_a_cluster_that_never_formed_says_which_node_is_missing(compose_cfg, tmp_path):
    overrides = ["parallel=data2", "parallel.nodes=2", "parallel.master_addr=10.0.0.1"]
    head = validate(compose_cfg(overrides))
    said = msrun.failure_message(head, 29517, tmp_path, 1, no_cluster=True)
    assert "node 1 never joined the master at 10.0.0.1:29517" in said
    other = validate(compose_cfg([*overrides, "parallel.node_rank=1"]))
    said = msrun.cluster_not_formed(other, 29517, tmp_path)
    assert said.startswith(
        "node 1 could not join the master at parallel.master_addr=10.0.0.1:29517"
    )


def test_a_job_whose_workers_all_ended_is_stopped_while_msrun_lingers(tmp_path, monkeypatch):
    """A real process group (standing in for msrun) outliving its workers' recorded pids."""
    monkeypatch.setattr(msrun, "WORKERS_GONE_GRACE", 0.5)
    gone = subprocess.Popen(["true"])
    gone.wait()
    write_logs(tmp_path, {0: ""}, pids={0: gone.pid})
    lingering = start_group(["sleep", "60"])
    try:
        assert msrun.wait_for_job(lingering, tmp_path, False, 0, local_workers=1, poll=0.1) is False
        assert lingering.returncode == -signal.SIGTERM
    finally:
        if lingering.poll() is None:
            os.killpg(lingering.pid, signal.SIGKILL)


def test_rank_0_hands_the_launcher_its_result(tmp_path):
    ctx = context(tmp_path, [])
    ctx.run_dir.mkdir()
    msrun.write_result(ctx, 0.875)
    assert json.loads((ctx.run_dir / msrun.RESULT_FILE).read_text()) == {"objective": 0.875}
    msrun.write_result(ctx, float("nan"), pruned="trial 3 pruned")
    assert json.loads((ctx.run_dir / msrun.RESULT_FILE).read_text()) == {"pruned": "trial 3 pruned"}


@pytest.mark.parametrize(
    "row,down,said",
    [
        (
            "TIMEOUT|00:01:00|00:01:13|node[0-1]",
            None,
            "SLURM job 9_1: TIMEOUT (past its time limit, hydra.launcher.timeout_min), "
            "ran 00:01:13 of its time limit 00:01:00 on node[0-1]",
        ),
        (
            "CANCELLED by 0|00:10:00|00:00:40|node0",
            None,
            "SLURM job 9_1: CANCELLED by 0 (cancelled (scancel)), ran 00:00:40 of its time limit "
            "00:10:00 on node0",
        ),
        (
            "NODE_FAIL|00:10:00|00:00:29|node[0-1]",
            "node1: Not responding",
            "SLURM job 9_1: NODE_FAIL (a node of the job failed), ran 00:00:29 of its time limit "
            "00:10:00 on node[0-1]; down: node1: Not responding",
        ),
        (
            "NODE_FAIL|00:10:00|00:00:29|node[0-1]",
            "",
            "SLURM job 9_1: NODE_FAIL (a node of the job failed), ran 00:00:29 of its time limit "
            "00:10:00 on node[0-1]; down: none any more (the node is back)",
        ),
        ("", None, "SLURM job 9_1 ended without a result; sacct has no record of it"),
        (
            "(sacct: error: Slurm accounting storage is disabled)",
            None,
            "SLURM job 9_1 ended without a result; sacct has no record of it "
            "(sacct: error: Slurm accounting storage is disabled)",
        ),
    ],
)
def test_slurms_account_of_a_job_it_ended(row, down, said):
    assert slurm.describe("9_1", row, down) == said


# what `sacct -X -P -o JobID,State,NodeList -j 6` answered in the real cluster after node1 was
# lost (tests/e2e/test_slurm_cluster.py): the array's first record still listed tasks 0 and 1
# (array_task_str 0x7 in slurmdbd's job table), and came last
STALE_ARRAY = [
    "6_0|NODE_FAIL|node[0-1]",
    "6_1|NODE_FAIL|node[0-1]",
    "6_[0-2%3]|PENDING|None assigned",
]


def test_a_tasks_own_record_wins_over_its_arrays_stale_range_record():
    from sporeflow.launch.slurm_watcher import OwnRecordsWatcher

    info = OwnRecordsWatcher(delay_s=600).read_info(
        "\n".join(["JobID|State|NodeList", *STALE_ARRAY])
    )
    assert {job: info[job]["State"] for job in ("6_0", "6_1", "6_2")} == {
        "6_0": "NODE_FAIL",
        "6_1": "NODE_FAIL",
        "6_2": "PENDING",  # a task with no record of its own has its array's
    }
    assert OwnRecordsWatcher(delay_s=600).read_info("") == {}  # sacct said nothing yet


def test_the_verdict_reads_the_jobs_own_row():
    rows = "\n".join(
        f"{job}|{state}|00:10:00|00:00:29|node[0-1]"
        for job, state, _ in (row.split("|") for row in STALE_ARRAY)
    )
    assert slurm.own_row("6_1", rows) == "NODE_FAIL|00:10:00|00:00:29|node[0-1]"
    assert slurm.own_row("6_2", rows) == "PENDING|00:10:00|00:00:29|node[0-1]"  # the array's
    assert slurm.own_row("6_2", "(sacct: timed out)") == "(sacct: timed out)"


@pytest.mark.parametrize(
    "state,ended",
    [
        ("CANCELLED by 0", True),
        ("TIMEOUT", True),
        ("NODE_FAIL", True),
        ("FAILED", False),
        ("COMPLETED", False),
        ("", False),
    ],
)
def test_which_states_mean_slurm_ended_the_job(state, ended):
    assert slurm.ended_by_slurm(state) is ended


def follow_while(log, write) -> str:
    """What a LogFollower of `log` shows while `write()` adds to it (then stopped, drained)."""
    out = io.StringIO()
    with LogFollower(log, out, poll=0.01):
        write()
        time.sleep(0.1)
    return out.getvalue()


def test_the_console_shows_a_resumed_jobs_own_log_lines_not_the_earlier_runs(tmp_path):
    """msrun appends to worker_0.log: a resumed job's console starts with what this run adds
    (MindSpore's INFO chatter left out, a split UTF-8 character whole); a log started anew,
    shorter than before, is shown from its beginning."""
    log = tmp_path / "worker_0.log"
    log.write_text("epoch 1 of the earlier run\n" * 20)

    def resumed():
        with open(log, "ab") as f:
            f.write("resuming train from epoch_0002\n[INFO] chatter\nloss 0.5 \u00b1".encode()[:-1])
            f.flush()
            time.sleep(0.05)  # the follower reads the first half of the "\u00b1" alone
            f.write("\u00b1".encode()[-1:] + b" 0.1\n")

    assert follow_while(log, resumed) == "resuming train from epoch_0002\nloss 0.5 \u00b1 0.1\n"

    def anew():
        log.write_text("a new first line\n")

    assert follow_while(log, anew) == "a new first line\n"
