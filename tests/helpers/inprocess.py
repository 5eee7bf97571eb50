"""Run a job in this process, the way `python train.py` would after Hydra composed its config:
validate -> run_pipeline, against a sqlite store in the launch dir. For the unit tier: the
stage runner, specs, reuse and the pipeline without paying a new interpreter per test.

The jobs run here share one tracking writer per test process (`use_shared_writer`, started by
tests/unit/conftest.py), as a sweep's jobs share the sweep's: each job waits at its end until
the store has its records, but no job pays a writer's start (MLflow's import) of its own."""

from __future__ import annotations

import contextlib
from pathlib import Path

from helpers.train import CONF, TRAIN
from sporeflow.config.validation import validate
from sporeflow.core.context import RunContext
from sporeflow.entry.python_api import root_logger_kept
from sporeflow.launch.msrun import override

# a network and data set small enough that a whole pipeline takes seconds (random labels:
# these runs check mechanics, not learning)
TINY = [
    "dataset=synthetic",
    "dataset.image_size=8",
    "dataset.channels=1",
    "dataset.num_samples=128",
    "dataset.test_samples=64",
    "model=mlp",
    "model.hidden=16",
    "callbacks.progress_bar=false",
]
TINY_PIPELINE = [*TINY, "debug=dim_reduce"]


_SHARED_WRITER: dict[str, str] = {}  # "file": the writer file of the test process's writer


def use_shared_writer(writer_file: Path | None) -> None:
    """Name the shared writer the jobs run here use (None: each starts its own)."""
    _SHARED_WRITER.pop("file", None)
    if writer_file is not None:
        _SHARED_WRITER["file"] = str(writer_file)


@contextlib.contextmanager
def shared_writer_named():
    """SPOREFLOW_TRACKING_WRITER set to the test process's shared writer for a job's call,
    unless the caller named one (or none) itself."""
    import os

    from sporeflow.tracking.shared_writer import WRITER_ENV

    named = _SHARED_WRITER.get("file")
    if named is None or WRITER_ENV in os.environ:
        yield
        return
    os.environ[WRITER_ENV] = named
    try:
        yield
    finally:
        os.environ.pop(WRITER_ENV, None)


def context(launch_dir: Path, overrides, run: str = "run") -> RunContext:
    return RunContext(
        run_dir=Path(launch_dir) / run,
        launch_dir=Path(launch_dir),
        overrides=list(overrides),
        entry_script=TRAIN,
    )


def run_job(compose, launch_dir: Path, overrides, run: str = "run") -> tuple[float, object]:
    """(the job's objective, its validated config) of the job `overrides` composes, run here
    with run dir `<launch_dir>/<run>`."""
    from sporeflow.job.pipeline import run_pipeline
    from sporeflow.job.plan import plan_job

    cfg = validate(compose(list(overrides)))
    with shared_writer_named():
        job = run_pipeline(plan_job(cfg, context(launch_dir, overrides, run)))
        return job.objective, cfg  # what train.py returns


def _entry(app: str = "train"):
    """train.py's (or eval.py's) @hydra.main function, made here with its conf/ as an absolute
    path (Hydra finds a relative one beside the calling script only when it runs as __main__)."""
    import hydra

    from sporeflow.entry.app import run_task
    from sporeflow.entry.eval_app import run_eval
    from sporeflow.entry.hydra_setup import register_configs

    register_configs()
    task = {"train": run_task, "eval": run_eval}[app]

    @hydra.main(version_base="1.3", config_path=str(CONF), config_name=app)
    def main(cfg) -> float:
        return task(cfg)

    return main


def train_cli(
    args, launch_dir: Path, run_dir: str | None = "run", app: str = "train"
) -> tuple[int, str]:
    """`python train.py ARGS` (or eval.py: app="eval") in `launch_dir`, in this process: (exit
    code, what it printed on stderr). Everything the command changes in the process is put back:
    the argv, the working folder, stderr, the signal handlers, HYDRA_FULL_ERROR, Hydra's global
    state and the root logger (Hydra gives it a handler on the job's log file; a refused job's
    run dir is removed, and a handler left behind that a later `dictConfig` closed - MLflow
    calls one - reopens that missing file at the next test's first log line)."""
    import io
    import os
    import signal
    import sys
    import traceback

    from hydra.core.global_hydra import GlobalHydra

    from sporeflow.entry.app import run_cli

    where = [override("hydra.run.dir", Path(launch_dir) / run_dir)] if run_dir is not None else []
    # the job is named after train.py, as when it runs as a script
    flags = [a for a in args if a in ("-m", "--multirun")]  # Hydra reads flags before overrides
    argv = [str(TRAIN.with_name(f"{app}.py")), *flags, *where, f"hydra.job.name={app}"]
    argv += ["callbacks.progress_bar=false"] * (app == "train")
    argv += [a for a in args if a not in flags]
    saved = (sys.argv, os.getcwd(), sys.stderr, dict(os.environ))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    err = io.StringIO()
    code = 0
    try:
        sys.argv = argv
        os.chdir(launch_dir)
        os.environ.pop("HYDRA_FULL_ERROR", None)
        GlobalHydra.instance().clear()
        with contextlib.redirect_stderr(err), root_logger_kept(), shared_writer_named():
            try:
                run_cli(_entry(app))
            except SystemExit as ex:
                code = int(ex.code or 0)
            except Exception:  # noqa: BLE001 - what the interpreter does with an uncaught error: exit 1
                traceback.print_exc()
                code = 1
    finally:
        sys.argv, cwd, sys.stderr, env = saved
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        GlobalHydra.instance().clear()
    return code, err.getvalue()


def run_train_here(
    args, cwd: Path, env: dict | None = None, timeout: float = 0, run_dir="run", app="train"
):
    """helpers.train.run_train's twin in this process: `python train.py ARGS` in `cwd` with
    `env` added to the environment for the call; a CompletedProcess-like (returncode, stderr,
    stdout). For jobs that need no process of their own (no signals, no msrun, no probe of
    the process's imports)."""
    import io
    import os
    import subprocess

    added = {"MLFLOW_TRACKING_URI": "", **(env or {})}
    before = {k: os.environ.get(k) for k in added}
    out = io.StringIO()
    try:
        os.environ.update(added)
        with contextlib.redirect_stdout(out):
            code, err = train_cli(args, Path(cwd), run_dir, app)
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return subprocess.CompletedProcess(args, code, out.getvalue(), err)


def sporeflow_here(cwd: Path, *args: str):
    """helpers.train.sporeflow_cli's twin in this process: the `sporeflow` command's main() in
    `cwd` against its default store; a CompletedProcess-like (returncode, stdout, stderr)."""
    import io
    import os
    import subprocess

    from sporeflow.entry import cli

    out, err, before = (
        io.StringIO(),
        io.StringIO(),
        (os.getcwd(), os.environ.get("MLFLOW_TRACKING_URI")),
    )
    try:
        os.chdir(cwd)
        os.environ["MLFLOW_TRACKING_URI"] = ""
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli.main(list(args))
            except SystemExit as ex:
                code = int(ex.code or 0)
    finally:
        os.chdir(before[0])
        if before[1] is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before[1]
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


SPHERE = Path(__file__).resolve().parent / "sphere" / "sphere.py"


def sphere_sweep(hydra_sweep_runner, sweep_dir: Path, task, overrides, config_name="config"):
    """Hydra's own in-process sweep (its pytest plugin's runner: a context manager) of the
    sphere app's config `config_name` with `task` as the task function."""
    return hydra_sweep_runner(
        calling_file=str(SPHERE),
        calling_module=None,
        task_function=task,
        config_path="conf",
        config_name=config_name,
        overrides=list(overrides),
        temp_dir=sweep_dir,
    )
