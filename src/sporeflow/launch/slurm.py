"""Where a task of a multi-node SLURM job stands, from SLURM's environment: which node it is
and which host is node 0 (the msrun master). `conf/cluster/slurm.yaml` reads these through the
`${sporeflow.slurm:...}` resolver, resolved in each task's own process - so one submitted job
starts one sporeflow launcher per node, each running msrun for its node's workers. Outside
SLURM they give a single node's values (node 0, 127.0.0.1).

`verdict` is the other side: what SLURM's accounting says of a job that ended without a result
(read by the process that submitted the sweep).

A requeue (`hydra.launcher.max_num_timeout` > 0): SLURM warns a job `signal_delay_s` before its
time limit (SIGUSR2); the job checkpoints at its next step, leaves its runs open and asks SLURM
to queue it again (`requeue`); the requeued job (`restart_count` > 0) continues its run dir and
runs (a dim-reduce pipeline: its finished stages as they were, the stage it stopped in from
its checkpoint; a parallel job: every rank from its own checkpoint of the step they agreed on,
launch.msrun; on several nodes each node's launcher continues its own run dir when node 0's
continues its run, storage.run_marker.node0_run_dir, and only node 0 asks SLURM).
`requeue_refusal` names the settings a requeue cannot work with."""

from __future__ import annotations

import os
import shlex
import subprocess


def in_slurm() -> bool:
    return bool(os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_JOB_NODELIST"))


def restart_count() -> int:
    """How often SLURM has requeued this job (its time limit, a preemption, a lost node)."""
    return int(os.environ.get("SLURM_RESTART_COUNT", 0) or 0) if in_slurm() else 0


def requeue_this_job() -> str:
    """Ask SLURM to put this job back on the queue (it ends this run of it); "" when done,
    else why not."""
    answer = _ask("scontrol", "requeue", os.environ["SLURM_JOB_ID"])
    return answer if answer.startswith("(") else ""


def requeue_refusal(launcher: dict) -> str | None:
    """Why a sweep's jobs cannot be requeued with these launcher settings (one line), else None."""
    if int(launcher.get("max_num_timeout") or 0) <= 0:
        return None
    delay, limit = int(launcher.get("signal_delay_s", 0)), int(launcher.get("timeout_min", 0))
    if delay >= limit * 60:
        return (
            f"hydra.launcher.signal_delay_s={delay}: SLURM's warning must come before the "
            f"time limit (hydra.launcher.timeout_min={limit}, {limit * 60} s), or every "
            "requeued job is told to stop as it starts"
        )
    return None


def folder_refusal(sweep_dir: str) -> str | None:
    """Why SLURM cannot run a sweep whose folder is `sweep_dir` (one line), else None. SLURM
    reads '%' in a job's log path as a pattern (`%j`: the job id) and submitit reads the same
    path back without it, so a folder named with '%' (a launch folder '100%') would lose every
    job's log and result; a space, '#' or '?' is quoted (submitit writes `#SBATCH` values
    through shlex)."""
    if "%" not in sweep_dir:
        return None
    return (
        f"hydra.sweep.dir={sweep_dir}: SLURM reads '%' in a job's log path as a pattern; "
        "start the sweep in a folder without '%', or give hydra.sweep.dir without it"
    )


def python_ignoring_the_warning(python: str) -> str:
    """The command a job's tasks start Python with (submitit's `python`): `python` with SIGUSR2
    ignored until the job's code chooses (SlurmLauncher.__call__: requeue, or ignore). SLURM's
    warning comes `signal_delay_s` before the limit and up to a minute earlier; with a short
    limit it can reach tasks still importing, whose default action for it is to die (the job
    then fails before its run begins). An ignored signal stays ignored across exec."""
    ignoring = shlex.quote('trap "" USR2; exec "$0" "$@"')
    return f"sh -c {ignoring} {shlex.quote(python)}"


def node_rank() -> int:
    return int(os.environ.get("SLURM_NODEID", 0)) if in_slurm() else 0


def master_addr() -> str:
    """The job's first host (SLURM_JOB_NODELIST, e.g. `gpu[07-08]` -> gpu07), parsed by submitit."""
    if not in_slurm():
        return "127.0.0.1"
    from submitit.slurm.slurm import SlurmJobEnvironment

    return SlurmJobEnvironment().hostnames[0]


PORT_BASE = 20000  # master ports 20000-29999, one per job id


def master_port() -> int:
    """The msrun master's port for this job: every node of a job computes the same one, and two
    jobs that share a node (SLURM packs jobs onto nodes unless told --exclusive) do not clash.
    Outside SLURM: 29517."""
    if not in_slurm():
        return 29517
    return PORT_BASE + int(os.environ["SLURM_JOB_ID"].split("_")[0]) % 10000


def resolve(what: str) -> object:
    """`${sporeflow.slurm:node_rank}`, `${sporeflow.slurm:master_addr}`, `${sporeflow.slurm:master_port}`,
    `${sporeflow.slurm:node_suffix}`
    (the run-dir suffix of nodes > 0: `_node1`, so nodes sharing a filesystem do not share a run dir)."""
    if what == "node_rank":
        return node_rank()
    if what == "master_addr":
        return master_addr()
    if what == "master_port":
        return master_port()
    if what == "node_suffix":
        return f"_node{node_rank()}" if node_rank() else ""
    raise ValueError(
        f"sporeflow.launch.slurm:{what}: allowed: node_rank, master_addr, master_port, node_suffix"
    )


GLOSS = {  # SLURM's job states for a job it ended, in a user's words
    "CANCELLED": "cancelled (scancel)",
    "TIMEOUT": "past its time limit, hydra.launcher.timeout_min",
    "NODE_FAIL": "a node of the job failed",
    "OUT_OF_MEMORY": "out of memory",
    "PREEMPTED": "preempted",
    "BOOT_FAIL": "its nodes did not boot",
    "DEADLINE": "past its deadline",
    "FAILED": "its batch script exited non-zero",
}


def ended_by_slurm(state: str) -> bool:
    """A job state (sacct's, e.g. "CANCELLED by 0") in which SLURM, not the job, ended it."""
    return (state.split() or [""])[0] in GLOSS and not state.startswith("FAILED")


def _ask(*cmd: str) -> str:
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.SubprocessError) as ex:
        return f"({cmd[0]}: {ex})"
    if out.returncode == 0:
        return out.stdout.strip()
    said = out.stderr.strip().splitlines()  # the last line is the one that says why
    return f"({said[-1] if said else f'{cmd[0]} exited with {out.returncode}'})"


def listed(job_ids: list[str]) -> list[str]:
    """Those of the jobs still on SLURM's queue (pending, running or completing)."""
    answer = _ask("squeue", "-h", "-o", "%i", "-j", ",".join(job_ids))
    return [] if answer.startswith("(") else answer.split()


def accounting_missing(job_id: str) -> str | None:
    """Why `sacct` cannot tell how the job ends (accounting off, sacct missing), else None."""
    answer = _ask("sacct", "-n", "-X", "-j", job_id, "-o", "State")
    return answer if answer.startswith("(") else None


def own_records_last(rows: list[str]) -> list[str]:
    """sacct's `JobID|...` rows with each array's range records (`6_[0-2%3]`) before the tasks'
    own records (`6_0`), so that a reader in which the last row wins (submitit's) takes a task's
    own state. SLURM's accounting can keep an array's first record listing tasks that have since
    started and ended: `6_[0-2%3]|PENDING` listed after `6_0|NODE_FAIL` for as long as the sweep
    ran (slurm-wlm 22.05 here)."""
    ranges = [row for row in rows if "[" in row.split("|", 1)[0]]
    return ranges + [row for row in rows if "[" not in row.split("|", 1)[0]]


def verdict(job_id: str) -> str:
    """What `sacct` says of the job (see `describe`), asked of SLURM now."""
    answer = _ask(
        "sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,Timelimit,Elapsed,NodeList"
    )
    row = own_row(job_id, answer)
    fields = row.split("|") if row and not row.startswith("(") else []
    down = None
    if len(fields) == 4 and fields[0].startswith("NODE_FAIL"):
        down = _ask("sinfo", "-R", "-h", "-n", fields[3], "-o", "%N: %E")
    return describe(job_id, row, down)


def own_row(job_id: str, answer: str) -> str:
    """From sacct's `JobID|State|...` rows, the job's own row less its JobID (an array's range
    record that lists the job too is passed over: `own_records_last`), else the first row's;
    `answer` itself when sacct said why it could not answer."""
    if not answer or answer.startswith("("):
        return answer
    rows = own_records_last(answer.splitlines())
    own = [row for row in rows if row.split("|", 1)[0] == job_id]
    return (own or rows)[0].split("|", 1)[-1]


def describe(job_id: str, sacct_row: str, down: str | None = None) -> str:
    """A job's end in a user's words from sacct's `State|Timelimit|Elapsed|NodeList` row, e.g.
    "SLURM job 34_1: TIMEOUT (past its time limit, ...), ran 00:01:13 of its time limit
    00:01:00 on node[0-1]"; for NODE_FAIL also which nodes are down and why (`down`: what
    `sinfo -R` lists, e.g. "node1: Not responding")."""
    fields = (
        sacct_row.splitlines()[0].split("|") if sacct_row and not sacct_row.startswith("(") else []
    )
    if len(fields) != 4:
        return f"SLURM job {job_id} ended without a result; sacct has no record of it {sacct_row}".rstrip()
    state, limit, elapsed, nodes = fields
    gloss = GLOSS.get(state.split()[0], "")
    text = f"SLURM job {job_id}: {state}" + (f" ({gloss})" if gloss else "")
    text += f", ran {elapsed} of its time limit {limit} on {nodes}"
    if state.startswith("NODE_FAIL"):
        text += (
            f"; down: {'; '.join((down or '').splitlines()) or 'none any more (the node is back)'}"
        )
    return text
