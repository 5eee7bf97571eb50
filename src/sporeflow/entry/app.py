"""The Hydra task function and the process exit codes around it.

`run_task` is what train.py's @hydra.main calls. It applies the CPU ISA choice before
MindSpore loads, validates, and then plays one of three roles: an msrun worker (trains its
rank), the launcher (starts msrun for a parallel job and trains nothing) or a stand-alone run.
The pipeline gets a plain config and a RunContext and never imports Hydra. `run_cli` maps
errors to exit codes: 2 for input a user must fix (entry/messages.py words it; no run dir is
left behind), 1 for a failed run, 128 + the signal for an interrupted one.
"""

from __future__ import annotations

import errno
import gc
import logging
import os
import shutil
import signal
import subprocess
import sys
import traceback
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig

from sporeflow.config.paths import from_launch_dir
from sporeflow.config.typed_text import as_typed
from sporeflow.core import signals, telemetry
from sporeflow.core.context import RunContext, SweepJob, TrialLink
from sporeflow.core.errors import ConfigError, SporeflowError, TrialPruned
from sporeflow.core.processes import exit_without_teardown
from sporeflow.entry import messages
from sporeflow.job.job_result import JobResult
from sporeflow.job.plan import JobPlan, plan_job
from sporeflow.launch import msrun, slurm
from sporeflow.runtime import cpu_isa, mindspore_log
from sporeflow.storage.files import unwritable
from sporeflow.storage.run_marker import read_run_marker, resume_off
from sporeflow.storage.rundir import CLAIM_FILE, claim_run_dir

Objective = float | list[float]  # a job's result: [accuracy, cost] for a list sweep.objective

log = logging.getLogger("sporeflow")


def _git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the sporeflow code that runs - its own checkout, wherever the command
    was launched from; (None, None) when the code is not in a git checkout."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(
                ["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=False
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    return commit, bool(git("status", "--porcelain", "--untracked-files=no"))


def run_context() -> RunContext:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hc = HydraConfig.get()
    in_sweep = (
        hc.mode == RunMode.MULTIRUN or msrun.under_msrun()
    )  # msrun workers inherit the job's env
    commit, dirty = _git_state()
    return RunContext(
        run_dir=Path(hc.runtime.output_dir).resolve(),
        launch_dir=Path(hc.runtime.cwd).resolve(),
        overrides=typed_overrides(hc),
        hydra_dir=Path(hc.runtime.output_dir, hc.output_subdir).resolve()
        if hc.output_subdir
        else None,
        git_commit=commit,
        git_dirty=dirty,
        entry_script=entry_script(hc),
        sweep=SweepJob.from_environ() if in_sweep else None,
        trial=TrialLink.from_environ() if in_sweep else None,
    )


def typed_overrides(hc) -> list[str]:
    """The command's overrides as typed: an override that holds an interpolation
    (`tracking.run_name=${model.name}`) is not resolved here - resolving it named no key when it
    failed, and changed what the run's `overrides` tag and resume hint repeat when it did not."""
    from omegaconf import OmegaConf

    return [str(o) for o in OmegaConf.to_container(hc.overrides.task, resolve=False)]


def entry_script(hc) -> Path:
    """The Hydra app's script (train.py), which msrun re-runs for each worker. Not always
    sys.argv[0]: a submitit job runs in `python -m submitit.core._submit`. The app's config dir
    (its primary config source, `conf/`) sits beside it, and Hydra names the job after it."""
    started = Path(sys.argv[0]).resolve()
    if started.name == f"{hc.job.name}.py":
        return started
    for source in hc.runtime.config_sources:
        if source.provider == "main" and source.schema == "file":
            return (Path(source.path).parent / f"{hc.job.name}.py").resolve()
    return started


def resume_hint(cfg: DictConfig, ctx: RunContext) -> str:
    """What to run after an interruption: resume= from the newest checkpoint (a pipeline
    continues the stage it stopped in, its finished stages kept)."""
    from sporeflow.storage.checkpoints import is_checkpoint  # MindSpore: after its log's place

    saved = sorted(
        (p for p in ctx.run_dir.rglob("epoch_*") if is_checkpoint(p)),
        key=lambda p: p.stat().st_mtime,
    )
    if not saved:
        return f"no checkpoint was written yet in {ctx.run_dir}"
    return (
        f"last checkpoint {saved[-1]}; continue with: python train.py {' '.join(ctx.overrides)} "
        f"resume={ctx.run_dir}"
    ).replace("  ", " ")


def mindspore_loaded(cfg: DictConfig, run_dir: Path) -> None:
    """MindSpore imported with the job's log settings and CPU ISA (both read once, at load)."""
    mindspore_log.apply(cfg.runtime.mindspore_log.value, run_dir)
    _isa_applied(cfg)
    mindspore_log.load()


def _isa_applied(cfg: DictConfig) -> None:
    """The ISA choice, before validation: checking `_target_`s imports MindSpore."""
    isa = cpu_isa.apply(cfg.runtime.cpu_isa.value)
    # debug: a refused command prints its refusal and nothing else
    log.debug("oneDNN ISA cap: %s", isa or "none (oneDNN's own choice)")
    log.debug("checking the config against its components (this imports MindSpore)")


def _say_accepted(plan: JobPlan) -> None:
    """Once the command is accepted (a refusal is all a refused command prints): a requeued
    job's continuation, and the settings it will not use."""
    if plan.requeues:
        print(
            f"[sporeflow] SLURM requeued this job ({plan.requeues} time(s)): it continues "
            f"{plan.ctx.run_dir}",
            file=sys.stderr,
        )
    for line in plan.unused:
        print(f"[sporeflow] note: {line}", file=sys.stderr)


def _run_as_worker(plan: JobPlan) -> JobResult:
    """One rank of an msrun job: the launcher checked the inputs and claimed the run dir;
    rank 0 leaves the result where the launcher reads it; every rank ends with msrun.end_worker."""
    from mindspore.communication import get_rank

    from sporeflow.job.pipeline import run_pipeline  # imports MindSpore: after the ISA choice

    cfg, ctx = plan.cfg, plan.ctx
    msrun.record_worker_pid(ctx, cfg.parallel.workers)
    armed = os.environ.get(msrun.REQUEUE_ENV)
    if armed is not None:  # its launcher passes SLURM's warning on as a file
        signals.requeue_on_file(msrun.requeue_file(ctx.run_dir), int(armed))
    try:
        job = run_pipeline(plan)
        weights = str(job.weights) if job.weights else None
        result: dict = {"metrics": job.metrics, "run_id": job.run_id, "weights": weights}
    except TrialPruned as ex:  # every rank stopped at the same step: a clean end for msrun
        job, result = JobResult(), {"pruned": str(ex)}
    except signals.Requeued as ex:  # the same, for a requeue: the launcher asks SLURM
        job, result = JobResult(), {"requeued": ex.requeues}
    if get_rank() == 0:
        msrun.write_result(ctx, job.objective, **result)
    msrun.end_worker(ctx, get_rank(), plan.run.parallel.node_rank)
    return job


def _run_as_launcher(plan: JobPlan) -> JobResult:
    """A parallel job: start msrun for this node's workers; node 0 owns the MLflow runs."""
    from sporeflow.job import runs

    cfg, ctx = plan.cfg, plan.ctx
    found = msrun.launch(
        cfg,
        ctx,
        before_start=lambda: runs.prepare_store(plan.run.tracking, ctx),
        on_end=lambda status: runs.mark_ended(plan.run.tracking, ctx, status),
    )
    weights = found.get("weights")
    return JobResult(
        found.get("metrics", {}), found.get("run_id"), weights and Path(weights), found["objective"]
    )


def _run_stand_alone(plan: JobPlan) -> JobResult:
    from sporeflow.job.pipeline import run_pipeline  # imports MindSpore: after the ISA choice

    return run_pipeline(plan)


def _role_of(plan: JobPlan) -> Callable[[JobPlan], JobResult]:
    """The process the user started: the launcher of a parallel job, or the whole run."""
    return _run_as_launcher if msrun.needs_launch(plan.cfg) else _run_stand_alone


def _checked_and_claimed(plan: JobPlan) -> None:
    """Inputs (data folders, resume=, basis file) checked and the run dir claimed, before work."""
    from sporeflow.job.preflight import check_inputs  # imports MindSpore: after the ISA choice

    check_inputs(plan)
    claim_run_dir(plan.ctx.run_dir)


def run_task(cfg: DictConfig) -> Objective:
    """train.py's Hydra task: the job's objective (`sweep.objective`: by default the final
    validation accuracy, stage 2's in a pipeline) - what a sweeper optimises; a list objective
    `[<accuracy>, <cost>]` returns both (job.pipeline.job_objective)."""
    return run_job(cfg).objective


def run_job(cfg: DictConfig) -> JobResult:
    """Validate, then play this process's role; the job's result (its objective, metrics, run
    and weights: what the Python API returns, tracking on or off)."""
    worker = msrun.under_msrun()
    if worker:
        signals.die_with_parent()  # a worker (or msrun's scheduler) never outlives msrun
    ctx = run_context()
    if ctx.sweep is not None and not worker:
        quiet_console()
    if worker or ctx.sweep is not None:  # a sweep's process must end its parent run
        signals.install()
    else:  # until the checks pass, an interrupt leaves nothing behind
        signals.exit_at_once(lambda: remove_unused_run_dir(ctx.run_dir))
    try:
        # every fact below is read from the plan; a worker's launcher passed a requeue's resume=
        mindspore_loaded(cfg, ctx.run_dir)
        cfg = as_typed(cfg, ctx.overrides)  # text settings as typed, not as Hydra's numbers
        cfg = from_launch_dir(cfg, ctx.launch_dir)  # relative paths: the launch folder's
        plan = plan_job(cfg, ctx, 0 if worker else slurm.restart_count())
        if not worker:
            _checked_and_claimed(plan)
            _say_accepted(plan)
        signals.install()
        role = _run_as_worker if worker else _role_of(plan)
        return role(plan)
    except messages.usage_errors():
        if ctx.sweep is None:  # a sweep job's dir keeps its outcome (sporeflow_job.json)
            remove_unused_run_dir(ctx.run_dir)  # only if nothing but Hydra's files is in it
        raise
    except signals.Interrupted as ex:
        if run_started(cfg, ctx):
            ex.hint = resume_hint(cfg, ctx)
        elif ctx.sweep is None:  # nothing was made yet: nothing is left behind
            remove_unused_run_dir(ctx.run_dir)
        raise


def quiet_console() -> None:
    """A sweep job's progress lines (INFO) go to its log file only (`<job dir>/train.log`): the
    console keeps Hydra's line naming the job, warnings, and the job's one-line result."""
    for handler in logging.getLogger().handlers:
        if type(handler) is logging.StreamHandler:  # not a FileHandler (a subclass)
            handler.setLevel(logging.WARNING)


def run_started(cfg: DictConfig, ctx: RunContext) -> bool:
    """Whether this job has an MLflow run to end (its marker is in the run dir) or continues
    one (resume=): an interruption before that leaves nothing to mark or continue."""
    return not resume_off(cfg.resume) or bool(read_run_marker(ctx.run_dir).get("mlflow_run_id"))


HYDRA_FOLDERS = ("outputs", "multirun", "eval")  # what Hydra makes above a run's <date>/


def remove_unused_run_dir(run_dir: Path) -> None:
    """A refused command leaves no run dir behind: Hydra made it (and wrote .hydra/ and the
    job log, train.log or eval.log) before sporeflow could check anything."""
    if not run_dir.is_dir():
        return
    if all(
        p.name in (".hydra", CLAIM_FILE, mindspore_log.FOLDER) or p.suffix == ".log"
        for p in run_dir.iterdir()
    ):
        shutil.rmtree(run_dir, ignore_errors=True)
        date_dir = run_dir.parent  # Hydra's outputs/<date>/ when it is left empty, then the
        if date_dir.parent.name in HYDRA_FOLDERS and not any(date_dir.iterdir()):  # folders
            date_dir.rmdir()  # above it that Hydra made for it alone (outputs/, outputs/eval/)
            parent = date_dir.parent
            while parent.name in HYDRA_FOLDERS and not any(parent.iterdir()):
                parent.rmdir()
                parent = parent.parent


def _run_ending_sweeps(hydra_main: Callable[[], object]) -> None:
    """hydra_main(); a sweep Hydra did not end (a job raised, Ctrl-C) still ends its MLflow run."""
    from sporeflow.entry import sweep_run

    try:
        hydra_main()
    except BaseException as ex:
        sweep_run.end_unfinished(ex)
        raise
    sweep_run.end_unfinished(None)


def _interrupted(ex: signals.Interrupted, multirun: bool) -> None:
    """One line and 128 + the signal. Before any run started nothing needs ending, and the
    interpreter is left at once: MindSpore interrupted while it loads crashes in Python's
    shutdown (a fatal error and ~80 lines of its own after ours, exit 134)."""
    if ex.hint:
        print(f"Interrupted by {ex.said}: the run is marked KILLED; {ex.hint}", file=sys.stderr)
        sys.exit(ex.exit_code)
    if multirun:  # the sweep's own run was ended above (_run_ending_sweeps)
        print(f"Interrupted by {ex.name} before any run started", file=sys.stderr)
        sys.exit(ex.exit_code)
    print(
        f"Interrupted by {ex.name} before any run started; nothing was left behind", file=sys.stderr
    )
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(ex.exit_code)


def refuse_resume_in_sweep(args: list[str]) -> None:
    """`-m ... resume=...` would continue one earlier run in every job and report its old
    result under each setting: refused before Hydra makes anything."""
    for arg in args:
        key, _, value = arg.partition("=")
        if key == "resume" and value.lower() not in ("false", ""):
            raise ConfigError(
                f"resume={value} in a sweep (-m): every job would continue that one run; "
                "resume a single run without -m, or start the sweep again (stage 1 and the "
                "baselines it finished are reused)"
            )


WRITE_ERRORS = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT)


def hydra_folder_refusal(ex: OSError, multirun: bool) -> ConfigError | None:
    """Hydra could not make or write the run dir (a sweep's dir) before sporeflow's task ran: a
    read-only or full launch folder gave a 47-line traceback ending in `OSError: [Errno 30]
    Read-only file system: 'outputs'` (issue 77). One line naming the folder instead (exit 2);
    None for an error of the task's own (a frame of sporeflow below run_cli), left as it was."""
    if ex.errno not in WRITE_ERRORS:
        return None
    here = Path(__file__).resolve().parents[1]  # src/sporeflow
    frames = traceback.extract_tb(ex.__traceback__)
    ours = {"run_cli", "_run_ending_sweeps"}
    if any(Path(f.filename).resolve().is_relative_to(here) and f.name not in ours for f in frames):
        return None
    where = Path(ex.filename).absolute() if ex.filename else Path.cwd()
    return _unwritable_folder(
        "hydra.sweep.dir" if multirun else "hydra.run.dir", where, ex.strerror
    )


def _unwritable_folder(key: str, where: Path, why: str) -> ConfigError:
    return ConfigError(
        f"{key}: cannot write {where} ({why}): Hydra makes the run's folder there "
        f"(by default under the launch folder {Path.cwd()}); launch from a folder you can "
        f"write, or give {key}=<a writable folder>"
    )


# Hydra's flags that print and exit: no folder is made
WRITES_NOTHING = {
    "--help",
    "-h",
    "--hydra-help",
    "--cfg",
    "-c",
    "--info",
    "-i",
    "--shell-completion",
}


def refuse_unwritable_sweep_folder(args: list[str]) -> None:
    """A sweep folder that cannot be written (hydra.sweep.dir as typed, else conf/train.yaml's
    `multirun/` under the launch folder), refused before Hydra: the sweep's callback fails
    first there, and Hydra prints its warning about that before its own OSError."""
    if WRITES_NOTHING & set(args):
        return
    given = [a.partition("=")[2] for a in args if a.lstrip("+").startswith("hydra.sweep.dir=")]
    if given and "${" in given[-1]:
        return  # an interpolation: Hydra's to resolve (and the OSError it meets is caught)
    folder = Path.cwd() / (Path(given[-1].strip("'\"")).expanduser() if given else "multirun")
    problem = unwritable(folder)
    if problem:
        raise _unwritable_folder("hydra.sweep.dir", folder, problem)


def run_cli(hydra_main: Callable[[], object]) -> None:
    """Run a @hydra.main function; exit 2 on a config error, 1 on a failed run."""
    telemetry.off_unless_chosen()
    user_wants_traceback = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let exceptions reach us instead of Hydra's exit(1)
    multirun = bool({"-m", "--multirun"} & set(sys.argv[1:]))
    if multirun:  # from now on an interrupt ends the sweep's parent run (_run_ending_sweeps)
        signals.install()
    else:
        sys.stderr = messages.WithoutHydraJobLine(sys.stderr)
    try:
        if multirun:
            refuse_resume_in_sweep(sys.argv[1:])
            refuse_unwritable_sweep_folder(sys.argv[1:])
        _run_ending_sweeps(hydra_main)
    except signals.Interrupted as ex:
        _interrupted(ex, multirun)
    except KeyboardInterrupt:  # before sporeflow's handlers were installed (Hydra composing)
        _interrupted(signals.Interrupted(signal.SIGINT), multirun)
    except messages.usage_errors() as ex:
        if user_wants_traceback:
            raise
        print(messages.refusal(ex, sys.argv), file=sys.stderr)
        sys.exit(2)
    except OSError as ex:
        refused = hydra_folder_refusal(ex, multirun)
        if refused is None or user_wants_traceback:
            raise
        print(messages.refusal(refused, sys.argv), file=sys.stderr)
        sys.exit(2)
    except SporeflowError as ex:
        if user_wants_traceback:
            raise
        print(f"Error: {ex}", file=sys.stderr)
        sys.exit(1)
    if msrun.under_msrun():  # a finished worker: MindSpore's teardown may crash it (processes)
        exit_without_teardown(0)
    # Done: keep the objects of MindSpore, MLflow and Hydra out of the collections the
    # interpreter runs at exit (about a second of a short job's wall time).
    gc.freeze()
