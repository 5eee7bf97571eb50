"""The run marker: what a resume (and the launcher closing a run) needs to find a run's MLflow
record again, kept as a small JSON file in the run dir; and which run dir a `resume=` names.
No MindSpore here: the launcher's hooks (job/runs.py) and the `${sporeflow.run_dir:...}`
resolver Hydra calls before anything else stay light."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sporeflow.core.errors import CheckpointError
from sporeflow.storage.files import write_text_atomic

RUN_MARKER = "sporeflow_run.json"


def write_run_marker(run_dir: Path, **info: Any) -> None:
    """Record what a resume needs to continue this run (MLflow run id, stage) in the run dir."""
    write_text_atomic(Path(run_dir) / RUN_MARKER, json.dumps(info, indent=2))


def read_run_marker(run_dir: Path) -> dict:
    path = Path(run_dir) / RUN_MARKER
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def resume_off(resume: bool | str | None) -> bool:
    """Whether `resume=` asks for no resume (false, as Hydra or a user may spell it)."""
    return resume is False or resume in ("false", "False", "", None)


def find_resume_dir(resume: bool | str, launch_dir: Path, node_rank: int = 0) -> Path | None:
    """The run dir `resume` points at: None for false, the newest run under outputs/ for true.
    `node_rank` > 0: this node's own run dir of a job on several nodes (node0_run_dir)."""
    if resume_off(resume):
        return None
    if resume is True or resume in ("true", "True"):
        markers = sorted(
            Path(launch_dir).glob(f"outputs/*/*/{RUN_MARKER}"), key=lambda p: p.stat().st_mtime
        )
        if not markers:
            raise CheckpointError(
                f"resume=true: no sporeflow run under {Path(launch_dir) / 'outputs'}; "
                "give the run directory: resume=<run dir>"
            )
        return markers[-1].parent
    run_dir = Path(str(resume)).expanduser()
    if not run_dir.is_dir():
        what = "a file" if run_dir.exists() else "does not exist"
        raise CheckpointError(f"resume={resume}: {what}, not a run dir; {_WHERE_RUNS_ARE}")
    if not (run_dir / "checkpoints").is_dir() and not is_pipeline_dir(run_dir, node_rank):
        raise CheckpointError(
            f"resume={resume}: not a run dir (no checkpoints/ in it); {_WHERE_RUNS_ARE}"
        )
    return run_dir.resolve()


@dataclass(frozen=True)
class Continuation:
    """The run dir a job continues: the one `resume=` names, or its own after a requeue."""

    run_dir: Path  # this node's: its ranks' checkpoints, snapshots and PCA basis
    node0_dir: Path  # node 0's: the run markers and stage results rank 0 writes
    pipeline: bool  # the dir is a dim-reduce pipeline's (else a plain run's)
    requeued: bool  # chosen because SLURM requeued the job into its own run dir


def continuation(
    resume: bool | str, launch_dir: Path, run_dir: Path, node_rank: int = 0, requeued: bool = False
) -> Continuation | None:
    """What a job continues: the run dir `resume=` names (find_resume_dir; CheckpointError
    when it names none), else after a SLURM requeue its own run dir once node 0's marks the
    job's run (rank 0 on node 0 marks every run), else nothing (a new run)."""
    found = find_resume_dir(resume, launch_dir, node_rank)
    again = found is None and requeued
    if again and read_run_marker(node0_run_dir(run_dir, node_rank)).get("mlflow_run_id"):
        found = Path(run_dir).resolve()
    if found is None:
        return None
    node0 = node0_run_dir(found, node_rank)
    return Continuation(found, node0, read_run_marker(node0).get("stage") == PIPELINE, again)


def is_pipeline_dir(run_dir: Path, node_rank: int = 0) -> bool:
    """Whether `run_dir` is a dim-reduce pipeline's (its marker names the pipeline's run; on a
    node > 0 node 0's run dir has the marker)."""
    return read_run_marker(node0_run_dir(run_dir, node_rank)).get("stage") == PIPELINE


def node0_run_dir(run_dir: Path, node_rank: int) -> Path:
    """Node 0's run dir of the job whose node `node_rank` writes into `run_dir` (`<job>_node<r>`,
    conf/cluster/slurm.yaml's sweep subdir, on a filesystem the nodes share). Rank 0 (on node 0)
    writes every marker and stage result there; each node keeps its own ranks' checkpoints,
    snapshots and PCA basis in its own run dir."""
    suffix = f"_node{node_rank}"
    if node_rank and run_dir.name.endswith(suffix):
        return run_dir.with_name(run_dir.name[: -len(suffix)])
    return run_dir


PIPELINE = "pipeline"  # the stage name a pipeline's own run (and its marker) carries


_WHERE_RUNS_ARE = (
    "give the folder a run wrote its checkpoints/ (or a pipeline its stage dirs) in "
    "(outputs/<date>/<time>_<id>/, the path the run printed, its MLflow run's run_dir tag), or "
    "true for the newest run under outputs/"
)


def hydra_run_dir(resume: Any, new_dir: str) -> str:
    """The `${sporeflow.run_dir:${resume},<new dir>}` resolver in conf/train.yaml: a resumed run
    goes on in its own run dir (its log, its claim), a new run gets `new_dir`. A `resume=` that
    names no run keeps `new_dir`: the entry then refuses it with the reason (exit 2)."""
    try:
        found = find_resume_dir(resume, Path.cwd())
    except CheckpointError:
        return new_dir
    return str(found) if found is not None else new_dir


def hydra_output_subdir(resume: Any, stamp: str) -> str:
    """Where Hydra writes the job's config: `.hydra`, or for a resume `.hydra/resume-<stamp>`,
    so the resumed run's own config stays as it was."""
    if resume is False or resume in ("false", "False", "", None):
        return ".hydra"
    return f".hydra/resume-{stamp}"
