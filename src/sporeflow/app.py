"""The Hydra task function and the process exit codes around it.

`run_task` is what train.py's @hydra.main calls: it validates, applies the CPU ISA choice
before MindSpore loads, and hands a plain config and a RunContext to the pipeline (which
never imports Hydra). `run_cli` maps errors to exit codes: 2 for input a user must fix (a
key, group option, value, data folder, resume= or basis file; one line, no run dir left
behind), 1 for a failed run, 128 + the signal for an interrupted one.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from omegaconf import DictConfig

from sporeflow import cpu_isa, launch, signals
from sporeflow.context import RunContext, SweepJob
from sporeflow.errors import ConfigError, DataError, SporeflowError
from sporeflow.rundir import CLAIM_FILE, claim_run_dir
from sporeflow.components import build_model
from sporeflow.schema import COMPONENT_GROUPS, allowed_keys, component_settings, validate
from sporeflow.strategies import check_parallel_plan

log = logging.getLogger("sporeflow")
_STARTED: dict = {}   # what run_task got to (its run dir), for the error path in run_cli


def _git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the sporeflow code that runs - its own checkout, wherever the command
    was launched from; (None, None) when the code is not in a git checkout."""
    here = Path(__file__).resolve().parent

    def git(*args: str) -> str | None:
        try:
            out = subprocess.run(["git", *args], cwd=here, capture_output=True, text=True, timeout=5, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout.strip() if out.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    return commit, bool(git("status", "--porcelain", "--untracked-files=no"))


def _run_context() -> RunContext:
    from hydra.core.hydra_config import HydraConfig

    from hydra.types import RunMode

    hc = HydraConfig.get()
    launch_dir = hc.runtime.cwd
    in_sweep = hc.mode == RunMode.MULTIRUN or launch.under_msrun()   # msrun workers inherit the job's env
    commit, dirty = _git_state()
    return RunContext(
        run_dir=Path(hc.runtime.output_dir).resolve(),
        launch_dir=Path(launch_dir).resolve(),
        overrides=list(hc.overrides.task),
        hydra_dir=Path(hc.runtime.output_dir, hc.output_subdir).resolve() if hc.output_subdir else None,
        git_commit=commit,
        git_dirty=dirty,
        entry_script=Path(sys.argv[0]).resolve(),
        sweep=SweepJob.from_environ() if in_sweep else None,
    )


def resume_hint(cfg: DictConfig, ctx: RunContext) -> str:
    """What to run after an interruption: the same command again (pipelines reuse a finished
    stage 1), or resume= from the newest checkpoint."""
    if cfg.boost.name.value == "dim_reduce":
        return "start the same command again: a finished stage 1 is reused"
    saved = sorted(ctx.run_dir.rglob("epoch_*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not saved:
        return f"no checkpoint was written yet in {ctx.run_dir}"
    return (f"last checkpoint {saved[-1]}; continue with: python train.py {' '.join(ctx.overrides)} "
            f"resume={ctx.run_dir}").replace("  ", " ")


def run_task(cfg: DictConfig) -> float:
    """Validate, then run the pipeline; returns the job's objective (`sweep.objective`: by
    default the final eval accuracy, stage 2's in a pipeline) - what a sweeper optimises."""
    if launch.under_msrun():
        signals.die_with_parent()  # a worker (or msrun's scheduler) never outlives msrun
    signals.install()
    ctx = _run_context()
    _STARTED["run_dir"] = ctx.run_dir
    # before validate(): checking `_target_`s imports them, and they import MindSpore
    isa = cpu_isa.apply(getattr(cfg.runtime.cpu_isa, "value", cfg.runtime.cpu_isa))
    log.info("oneDNN ISA cap: %s", isa or "none (oneDNN's own choice)")
    plain = validate(cfg)
    check_parallel_plan(plain, lambda: build_model(plain))
    if launch.under_msrun():
        launch.record_worker_pid(ctx, plain.parallel.workers)
    else:  # the launcher checked the inputs and claimed the dir for its workers
        from sporeflow.stages.preflight import check_inputs  # imports MindSpore: after the ISA choice

        check_inputs(plain, ctx)
        claim_run_dir(ctx.run_dir)
    try:
        if launch.needs_launch(plain):
            from sporeflow.stages import runs

            return launch.launch(plain, ctx, before_start=lambda: runs.prepare_store(plain, ctx),
                                 on_end=lambda status: runs.mark_ended(plain, ctx, status))
        from sporeflow.stages.pipeline import run_pipeline  # imports MindSpore: after the ISA choice

        value = run_pipeline(plain, ctx)
    except signals.Interrupted as ex:
        ex.hint = resume_hint(plain, ctx)
        raise
    if launch.under_msrun():
        from mindspore.communication import get_rank

        if get_rank() == 0:
            launch.write_result(ctx, value)
    return value


def _usage_errors() -> tuple[type[BaseException], ...]:
    """What a user fixes in the command or its input files: exit 2."""
    from hydra.errors import ConfigCompositionException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    return (ConfigError, DataError, ConfigCompositionException, MissingConfigException,
            OverrideParseException, OmegaConfBaseException)


def _component_keys(group: str) -> list[str]:
    """The settings of the component `group` would build with this command's other overrides
    (composed again without the override that failed)."""
    if group not in COMPONENT_GROUPS:
        return []
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    keep = [a for a in sys.argv[1:] if not a.startswith("-") and not a.lstrip("+~").startswith(f"{group}.")]
    try:
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(Path(sys.argv[0]).resolve().parent / "conf"), version_base="1.3"):
            node = compose("train", overrides=[a for a in keep if not a.startswith("hydra")])[group]
        return component_settings(group, node) or []
    except Exception:  # noqa: BLE001 - only a hint: the error itself is already known
        return []


def describe(ex: BaseException) -> str:
    """A config error as one line: the key (or group option) and what is allowed."""
    cause = ex.__cause__ if ex.__cause__ is not None else ex
    text = str(ex).split("\nConfig search path:")[0].strip()
    full_key = str(getattr(cause, "full_key", None) or getattr(ex, "full_key", None) or "")
    missing = re.search(r"Could not find '([^']+)/([^']+)'", text)
    if missing:
        group, option = missing.groups()
        options = re.findall(r"^\t(\S+)$", text, re.M)
        return f"{group}={option}: no such option; available: {', '.join(options) or 'none'}"
    if full_key and re.search(r"Key '[^']+' (is )?not in", str(cause)):
        parent = full_key.rpartition(".")[0]
        allowed = allowed_keys(parent) or _component_keys(parent)
        where = parent or "the top level"
        return f"{full_key}: no such key" + (f"; allowed under {where}: {', '.join(allowed)}" if allowed else "")
    converted = re.search(r"Value '(.*)' of type '\w+' could not be converted to (\w+)", str(cause))
    if full_key and converted:
        return f"{full_key}={converted.group(1)!r}: must be {converted.group(2).lower()}"
    enum = re.search(r"Invalid value '(.*)', expected one of \[(.*)\]", str(cause))
    if full_key and enum:
        return f"{full_key}={enum.group(1)!r}: allowed: {enum.group(2)}"
    first = next((line for line in text.splitlines() if line.strip()), text)
    return " ".join(first.split())


def _remove_unused_run_dir() -> None:
    """A refused command leaves no run dir behind: Hydra made it (and wrote .hydra/ and the
    job log) before sporeflow could check anything."""
    run_dir = _STARTED.get("run_dir")
    if run_dir is None or not run_dir.is_dir():
        return
    if {p.name for p in run_dir.iterdir()} <= {".hydra", "train.log", CLAIM_FILE}:
        shutil.rmtree(run_dir, ignore_errors=True)
        date_dir = run_dir.parent   # Hydra's outputs/<date>/ when it is left empty; nothing above it
        if date_dir.parent.name in ("outputs", "multirun") and not any(date_dir.iterdir()):
            date_dir.rmdir()


class _WithoutHydraJobLine:
    """stderr minus Hydra's "Error executing job with overrides: [...]" line, which a single
    run's own one-line message makes redundant (a sweep keeps it: it names the failed job)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return len(text) if text.startswith("Error executing job with overrides:") else self.stream.write(text)

    def __getattr__(self, name):
        return getattr(self.stream, name)


def _run_ending_sweeps(hydra_main: Callable[[], object]) -> None:
    """hydra_main(); a sweep Hydra did not end (a job raised, Ctrl-C) still ends its MLflow run."""
    from sporeflow import sweep

    try:
        hydra_main()
    except BaseException as ex:
        sweep.end_unfinished(ex)
        raise
    sweep.end_unfinished(None)


def run_cli(hydra_main: Callable[[], object]) -> None:
    """Run a @hydra.main function; exit 2 on a config error, 1 on a failed run."""
    user_wants_traceback = bool(os.environ.get("HYDRA_FULL_ERROR"))
    os.environ["HYDRA_FULL_ERROR"] = "1"  # let exceptions reach us instead of Hydra's exit(1)
    if not {"-m", "--multirun"} & set(sys.argv[1:]):
        sys.stderr = _WithoutHydraJobLine(sys.stderr)
    try:
        _run_ending_sweeps(hydra_main)
    except signals.Interrupted as ex:
        print(f"Interrupted by {ex.name}" + (f": the run is marked KILLED; {ex.hint}" if ex.hint
                                             else " before any run started"), file=sys.stderr)
        sys.exit(ex.exit_code)
    except _usage_errors() as ex:
        if user_wants_traceback:
            raise
        _remove_unused_run_dir()
        kind = "Data error" if isinstance(ex, DataError) else "Config error"
        print(f"{kind}: {describe(ex)}  (python train.py --help lists groups and options)", file=sys.stderr)
        sys.exit(2)
    except SporeflowError as ex:
        if user_wants_traceback:
            raise
        print(f"Error: {ex}", file=sys.stderr)
        sys.exit(1)
