"""`sporeflow` console script: tools around runs (training itself is `python train.py`).

sporeflow compare [--uri URI] [--experiment NAME] [--last N] [--seeds [--plot PNG]]
                  [--sweep ID|DIR|latest] [--format text|csv|markdown]
sporeflow compare RUN_A RUN_B [--uri URI] [--experiment NAME]
sporeflow ui [--uri URI] [--experiment NAME] [--port P] [--sweep ID|latest] [--links-only]
             [--dashboard-port P] [--dashboard-host 127.0.0.1]
sporeflow server --db postgresql://... --artifacts DIR [--host H] [--port P] [--auth] [-- MLFLOW ARGS]
sporeflow server add-user NAME --url URL [--viewer]
sporeflow predict SOURCE IMAGES [--out predictions.csv]
sporeflow merge-ckpt --src DIR --strategy FILE --out FILE
sporeflow sync DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sporeflow.config.schema import TrackingConfig
from sporeflow.core import console, signals, telemetry
from sporeflow.core.names import FRONT_TAG, STAGE_TAG, SWEEP_RUN_ID_TAG
from sporeflow.core.processes import start_group, stop_group
from sporeflow.core.uris import redacted, without_login
from sporeflow.entry import study_dashboard, team_server

DEFAULT_EXPERIMENT = TrackingConfig.experiment_name  # the schema's default, written once there
URI_ENV = "MLFLOW_TRACKING_URI"  # where a store URI with a password is given (not argv)
STORE_HELP = (
    f"MLflow store (default: ${URI_ENV} or sqlite:///./mlflow.db); without a password: "
    f"PGPASSWORD or ~/.pgpass hold a database's, MLFLOW_TRACKING_USERNAME/_PASSWORD a "
    f"server's login, or give the whole URI in ${URI_ENV}"
)


def _checked_uri(args: argparse.Namespace) -> str | None:
    """The store --uri names (else $MLFLOW_TRACKING_URI, else ./mlflow.db), or None after one
    line saying why not: a password on --uri (`ps` shows it: it is read from the environment,
    as `sporeflow server` reads it), a store that does not answer within seconds (MLflow would
    retry for minutes). The URI is shown without its password."""
    from sporeflow.tracking.store import resolve_uri

    uri = resolve_uri(args.uri, Path.cwd())
    try:
        team_server.refuse_password_on_argv("--uri", args.uri, URI_ENV)
        team_server.refuse_unreachable("--uri" if args.uri else URI_ENV, uri)
    except team_server.Refusal as ex:
        print(ex, file=sys.stderr)
        return None
    return uri


def _open_experiment(args: argparse.Namespace):
    """(uri, MlflowClient, experiment) of --uri/--experiment, or None after one line saying why
    not: the store refused (`_checked_uri`), no such experiment."""
    from mlflow.tracking import MlflowClient

    uri = _checked_uri(args)
    if uri is None:
        return None
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        print(f"no experiment {args.experiment!r} in {redacted(uri)}", file=sys.stderr)
        return None
    return uri, client, exp


def compare(args: argparse.Namespace) -> int:
    """One row per dim_reduce pipeline: each stage's accuracy, the gain with its 95% interval and
    McNemar p-value; with --seeds, one row per configuration: mean +- sd over its seeds; with
    --sweep, one row per job of that sweep (plain runs too); with two runs, those two
    (`compare_runs`)."""
    from sporeflow.report import pipeline_table as table

    if args.runs:
        return compare_runs(args)
    opened = _open_experiment(args)
    if opened is None:
        return 2
    uri, client, exp = opened
    if args.sweep:
        return compare_sweep(client, exp, uri, args)
    runs = client.search_runs(
        [exp.experiment_id],
        f"tags.{STAGE_TAG} = 'pipeline'",
        max_results=args.last,
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        print("(no boost=dim_reduce pipelines yet)", file=sys.stderr)
        return 0
    if not args.seeds:
        print("\n".join([*table.pipelines_table(runs), *table.answer_lines(runs)]))
        return 0
    groups = table.seed_groups(runs)
    if args.plot:
        from sporeflow.report.comparison import seeds_plot

        if seeds_plot(table.seed_arms(groups), Path(args.plot)):
            print(f"plot: {args.plot}", file=sys.stderr)
    print("\n".join(table.seeds_table(groups)))
    return 0


def compare_runs(args: argparse.Namespace) -> int:
    """RUN_A against RUN_B on the test images both were tested on (report.run_pair: the paired
    table, cost side by side, the config keys that differ); one line and exit 2 for two runs
    of other test images, a run that is not there, or options of the other modes."""
    if len(args.runs) != 2 or args.sweep or args.seeds or args.plot:
        print(
            f"compare {' '.join(args.runs)}: give two runs (RUN_A RUN_B: run dirs, run ids or "
            "models:/ URIs), without --sweep, --seeds or --plot",
            file=sys.stderr,
        )
        return 2
    uri = _checked_uri(args)
    if uri is None:
        return 2
    _mindspore_log_off_console()
    from sporeflow.core.errors import ConfigError
    from sporeflow.job.run_sides import compared
    from sporeflow.tracking.store_reads import StoreReads

    try:
        pair = compared(*args.runs, StoreReads.at(uri, args.experiment))
    except ConfigError as ex:
        print(f"sporeflow compare: {ex}", file=sys.stderr)
        return 2
    print("\n".join(pair.lines()))
    return 0


def _mindspore_log_off_console() -> None:
    """MindSpore's own lines to the temp folder's log, off the console (a tool without a run
    dir reading runs' weights and files)."""
    from sporeflow.runtime import mindspore_log

    mindspore_log.apply("run_dir", Path(tempfile.gettempdir()) / "sporeflow-predict")
    mindspore_log.load()


def compare_sweep(client, exp, uri: str, args: argparse.Namespace) -> int:
    """One row per job of one sweep, best first by its objective, swept keys as columns; as
    text, first one row per point (the jobs' settings but the seed) and the verdict; a sweep of
    [accuracy, cost] then its front (one row per point, the lines the sweep ended with)."""
    from sporeflow.report import sweep_report as report
    from sporeflow.tracking.store_reads import StoreReads

    reads = StoreReads.at(uri, args.experiment)
    run = report.sweep_run(reads, args.sweep)
    if run is None:
        print(
            f"--sweep {args.sweep}: no sweep run in experiment {args.experiment!r} "
            "(a sweep parent's run id or name sweep-<date>-<time>, or its sweep dir; `latest` "
            "picks the newest)",
            file=sys.stderr,
        )
        return 2
    found = report.summarize(reads, run)
    header, rows = report.table_rows(found.jobs, found.keys)
    if args.format == "text":
        print(
            f"sweep {run.data.tags.get('mlflow.runName', '')} ({run.info.run_id}, {run.info.status}): "
            f"{len(found.jobs)} jobs, the leader's first, then by {found.key}",
            file=sys.stderr,
        )
    decision, leader = found.decision, found.leader
    if args.format == "text" and decision is not None and leader is not None:
        print(report.render(*decision.rows(found.key, leader.point)))  # one row per point
    print(report.render(header, rows, args.format), end="")
    if args.format == "text" and decision is not None and leader is not None:
        on_test = report.selected_on_test(found.jobs)
        # the verdict and the leader the sweep ended with, same store and rule; then the
        # leader on the test images and its one-line answer
        print(decision.line(found.key, "test" if on_test else "validation"))
        print(leader.line())
        if leader.point is not None:
            tested = report.reported(reads, found.jobs, leader.point, found.key)
            if tested is not None:
                print(report.reported_line(leader.point, tested, on_test))
        if found.answer:
            print(found.answer)
    if args.format == "text" and found.cost:  # a sweep of [accuracy, cost]: its front last
        if found.front is None:
            print(
                f"front: none (no point has both per-image {found.key} outcomes and a {found.cost})"
            )
        else:
            print(report.render(*found.front.rows(found.key)))
            lines = [*found.front.beaten_lines(), found.front.line(found.key)]
            print("\n".join([*lines, found.front_leader()]))
    return 0


def ui(args: argparse.Namespace) -> int:
    """Serve the store with `mlflow server` on 127.0.0.1 and print links into its ML view; the
    sweep's Optuna study, if it has one, in optuna-dashboard beside it (entry/study_dashboard.py:
    read-only, loopback only, a child process that ends with this one). A tracking server
    (http(s)://) serves its own UI: the links open it, no MLflow server is started. The store
    is probed first (`_open_experiment`): no password from argv, one line if it does not answer."""
    from sporeflow.report.sweep_report import sweep_run
    from sporeflow.tracking.store_reads import StoreReads

    opened = _open_experiment(args)
    if opened is None:
        return 2
    uri, client, exp = opened
    remote = uri.startswith(("http://", "https://"))  # a tracking server serves its own UI
    base = without_login(uri).rstrip("/") if remote else f"http://127.0.0.1:{args.port}"
    reads = StoreReads.at(uri, args.experiment)
    sweep = sweep_run(reads, args.sweep)
    links = [f"{label:12s} {link}" for label, link in _ui_links(base, client, exp, reads, sweep)]
    front_line = _front_line(reads, sweep)
    taken = None if args.links_only or remote else port_taken(args.port)
    if taken:
        print(f"--port {args.port}: {taken}; give another --port", file=sys.stderr)
        return 2
    try:
        dashboard = study_dashboard.plan(
            sweep, args.dashboard_host, args.dashboard_port, serve=not args.links_only
        )
    except team_server.Refusal as ex:
        print(ex, file=sys.stderr)
        return 2
    shown = [f"{'dashboard':12s} {dashboard.link}"] if dashboard is not None else []

    def show(up: bool = True) -> None:
        print("\n".join(links + (shown if up else [])), flush=True)
        if front_line:  # below the links, not among them: stdout stays `<label> <link>` lines
            print(front_line, file=sys.stderr, flush=True)

    if args.links_only or (remote and dashboard is None):
        show()
        return 0
    if remote:  # only the study's dashboard is served here
        show()
        return _serve(dashboard.command, dashboard.env)
    server = [str(Path(sys.executable).parent / "mlflow"), "server", "--host", "127.0.0.1"]
    server += ["--port", str(args.port), "--workers", "1"]  # one user's browser on this machine
    server += ["--uvicorn-opts", "--no-access-log"]  # not a console line per request
    print(f"serving {redacted(uri)} at {base} (Ctrl-C stops it)", file=sys.stderr)
    return _serve(
        server,
        {team_server.DB_ENV: uri},
        ready=(base, show),
        beside=dashboard,
    )


def _ui_links(base: str, client: Any, exp: Any, reads: Any, sweep: Any) -> list[tuple[str, str]]:
    """report.sweep_report.ui_links of the sweep (None: the experiment's link only), its jobs
    read from the store, and its parent's artifacts where it decided a front (the figure's link
    needs the figure)."""
    from sporeflow.report.sweep_report import ui_links

    if sweep is None:
        return ui_links(base, exp.experiment_id, None, [])
    found = f"tags.`{SWEEP_RUN_ID_TAG}` = '{sweep.info.run_id}'"
    jobs = client.search_runs([exp.experiment_id], found, max_results=200)
    fronted = sweep.data.tags.get(FRONT_TAG)
    artifacts = reads.artifact_names(sweep.info.run_id) if fronted else None  # None: unknown
    return ui_links(base, exp.experiment_id, sweep, jobs, artifacts)


def _front_line(reads: Any, sweep: Any) -> str:
    """A sweep of accuracy and cost (its parent's `sweep.cost` tag): its front's line, decided
    again from the store as `sporeflow compare --sweep` does; "" for a sweep of one objective.
    Never stops `ui`: a front that cannot be decided is said in the line."""
    if sweep is None or not sweep.data.tags.get("sweep.cost"):
        return ""
    from sporeflow.report import sweep_report as report

    try:
        found = report.summarize(reads, sweep)
    except Exception as ex:  # noqa: BLE001 - the links and the servers matter more
        return f"front: not decided ({ex})"
    if found.front is None:
        return f"front: none (no point has both per-image {found.key} outcomes and a {found.cost})"
    return found.front.line(found.key)


def port_taken(port: int) -> str | None:
    """Why 127.0.0.1:`port` cannot be ours (another process, perhaps another user's server,
    holds it: links printed now would open theirs), or None."""
    import socket

    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as ex:
            return f"127.0.0.1:{port} is taken ({ex.strerror}), perhaps by another user's server"
    return None


def server_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """`mlflow server`'s environment: MLflow's job runner (GenAI jobs and trace rollups, idle
    consumers polling all the time) and its usage telemetry off unless the user turned them on;
    sporeflow needs neither. `extra` (the database URI, the auth app's settings) on top."""
    quiet = {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", "MLFLOW_DISABLE_TELEMETRY": "true"}
    return {**quiet, **os.environ, **(extra or {})}


def _serve(
    command: list[str],
    extra_env: dict[str, str] | None = None,
    ready: tuple[str, Callable[[bool], None]] | None = None,
    beside: study_dashboard.Dashboard | None = None,
) -> int:
    """Run `mlflow server` until it ends or Ctrl-C / SIGTERM, which stop it and every worker.
    `ready` = (its URL, what to do once it answers there, told whether `beside` answers too):
    links are printed only then. `beside`: optuna-dashboard, started first and stopped
    whenever the server ends."""
    signals.install()
    side = None
    try:
        if beside is not None:  # its own output goes to stderr too
            side = start_group(beside.command, env={**os.environ, **beside.env}, stdout=sys.stderr)
        # the server's own output goes to stderr: stdout carries only the links (`ui`)
        proc = start_group(command, env=server_env(extra_env), stdout=sys.stderr)
        try:
            if ready is not None and _answers(ready[0], proc):
                up = beside is not None and side is not None
                if up and not study_dashboard.answers(beside.url, side):
                    print(f"dashboard: it did not answer at {beside.url}", file=sys.stderr)
                    up = False
                ready[1](up)
            return proc.wait()
        except signals.Interrupted as ex:  # SIGTERM: uvicorn's quiet shutdown (SIGINT: tracebacks)
            stop_group(proc, signal.SIGTERM, grace=10.0)
            return ex.exit_code
    finally:
        if side is not None:
            stop_group(side, signal.SIGTERM, grace=5.0)


def _answers(url: str, proc) -> bool:
    """Wait until the server we started answers at `url`; False if it ended first."""
    from sporeflow.tracking.store import server_problem

    while proc.poll() is None:
        if server_problem(url, timeout=2.0) is None:
            return True
        time.sleep(0.5)
    return False


def server(args: argparse.Namespace) -> int:
    """A team's store: `mlflow server` over a database (PostgreSQL), artifacts served from a
    folder, so every machine needs only tracking.uri=http://<host>:<port>; logins on whenever
    it listens beyond loopback (entry/team_server.py). `sporeflow server add-user NAME --url
    URL [--viewer]` adds a user to a running server."""
    try:
        if args.mlflow_args[:1] == ["add-user"]:
            team_server.add_user(_add_user_parser().parse_args(args.mlflow_args[1:]))
            return 0
        if not args.artifacts:
            raise team_server.Refusal(
                "--artifacts: missing; the folder the server keeps artifacts in"
            )
        plan = team_server.plan(args, str(Path(sys.executable).parent / "mlflow"))
    except team_server.Refusal as ex:
        print(ex, file=sys.stderr)
        return 2
    team_server.announce(args, plan)
    return _serve(plan.command, plan.env)


def merge_ckpt(args: argparse.Namespace) -> int:
    """Sliced per-rank checkpoints + the strategy file -> one full checkpoint."""
    import mindspore as ms

    from sporeflow.storage.files import atomic_path

    src, strategy, out = Path(args.src), Path(args.strategy), Path(args.out)
    if not strategy.is_file():
        print(
            f"--strategy {strategy} does not exist (MindSpore writes it where "
            "parallel.strategy_ckpt_config.save_file says)",
            file=sys.stderr,
        )
        return 2
    ranks = sorted(src.glob("rank_*")) if src.is_dir() else []
    if not any(list(r.glob("*.ckpt")) for r in ranks):
        print(
            f"--src {src} must hold rank_<r>/ folders with .ckpt files (run dir: checkpoints/)",
            file=sys.stderr,
        )
        return 2
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
        try:
            ms.transform_checkpoints(
                str(src), tmp, "merged", src_strategy_file=str(strategy), dst_strategy_file=None
            )
        except (ValueError, RuntimeError, TypeError) as ex:
            print(f"merge failed: {ex}", file=sys.stderr)
            return 1
        merged = next(Path(tmp, "rank_0").glob("*.ckpt"))
        with atomic_path(out) as partial:
            shutil.move(str(merged), partial)
    print(f"merged {len(ranks)} ranks into {out}")
    return 0


def sync(args: argparse.Namespace) -> int:
    """Send what the tracking journals under a run or sweep dir still hold (idempotent)."""
    from sporeflow.tracking.journal import journals_under
    from sporeflow.tracking.sync import sync as sync_root

    root = Path(args.dir)
    journals = journals_under(root) if root.is_dir() else []
    if not journals:
        print(
            f"{root}: no tracking journal under it (a run dir or sweep dir holds tracking/*.jsonl)",
            file=sys.stderr,
        )
        return 2
    code = 0
    for done in sync_root(root):  # a sweep's jobs after its parent, whatever their order
        where = (
            done.journal.relative_to(root) if done.journal.is_relative_to(root) else done.journal
        )
        if done.busy:
            print(f"{where}: its writer is still running ({done.left} records to go); left to it")
            continue
        if done.no_header:
            print(_no_header_line(where, done))
            code = 1 if done.left else code
            continue
        ended = (
            f"; ended {len(done.ended)} runs KILLED (their process is gone)" if done.ended else ""
        )
        line = f"{where}: sent {done.sent} records, {done.left} left{ended}"
        if done.error:
            line += f"; the store failed: {done.error}"
            code = 1
        print(line)
    return code


def _no_header_line(where: Path, done: Any) -> str:
    """`sync`'s line for a journal whose line 1 is not its header: none of its records can
    be sent (the header names their store, experiment and owner); it stays as it is."""
    return (
        f"{where}: not sent: its line 1 is {done.no_header}, not the header naming the store "
        f"its records go to, so its {done.left} records cannot be sent; they stay as they are in "
        f"{done.journal} (sync sends them once line 1 is its header again)"
    )


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", help=STORE_HELP)
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT)


def _compare_parser(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="stage accuracies and gain of every dim_reduce pipeline, a sweep's jobs, or two "
        "runs on their test images",
    )
    p.add_argument(
        "runs",
        nargs="*",
        metavar="RUN",
        help="two runs (RUN_A RUN_B: run or stage dirs, MLflow run ids, models:/ URIs, as "
        "eval.py source= takes them): A against B on the test images both were tested on "
        "(McNemar p, the difference with its 95%% interval), cost side by side, the config "
        "keys that differ",
    )
    _store_args(p)
    p.add_argument("--last", type=int, default=20, help="how many pipelines, newest first")
    p.add_argument(
        "--seeds",
        action="store_true",
        help="one row per configuration: mean +- sd over its seeds (e.g. after -m seed=1,2,3)",
    )
    p.add_argument(
        "--plot",
        metavar="PNG",
        help="with --seeds: also draw each arm's mean +- sd per configuration",
    )
    p.add_argument(
        "--sweep",
        metavar="ID|NAME|DIR|latest",
        help="one sweep's jobs (its parent run's id or name sweep-<date>-<time>, its sweep "
        "dir, or latest): best first, swept keys as columns",
    )
    p.add_argument(
        "--format",
        choices=("text", "csv", "markdown"),
        default="text",
        help="with --sweep: table format",
    )
    p.set_defaults(fn=compare)


def _ui_parser(sub) -> None:
    p = sub.add_parser(
        "ui", help="serve the MLflow store on 127.0.0.1 and print links to a sweep's ML view"
    )
    _store_args(p)
    p.add_argument("--port", type=int, default=5000)
    p.add_argument(
        "--sweep",
        metavar="ID|NAME|latest",
        default="latest",
        help="the sweep the links open (its parent run's id or name, or latest)",
    )
    p.add_argument("--links-only", action="store_true", help="print the links, start no server")
    p.add_argument(
        "--dashboard-port",
        type=int,
        default=None,
        help="the port of optuna-dashboard for the sweep's Optuna study (default: a free one; "
        f"with --links-only {study_dashboard.LINKS_ONLY_PORT}, optuna-dashboard's own)",
    )
    p.add_argument(
        "--dashboard-host",
        default="127.0.0.1",
        help="a loopback address only: optuna-dashboard has no login, so another host is "
        "refused (exit 2); reach it from another machine through an SSH tunnel",
    )
    p.set_defaults(fn=ui)


def _server_parser(sub) -> None:
    p = sub.add_parser(
        "server",
        help="a team's store: mlflow server over PostgreSQL, artifacts served from a folder",
        description=server.__doc__,
    )
    p.add_argument(
        "--db",
        help="postgresql://user@host:port/database, its password in PGPASSWORD or ~/.pgpass "
        "(or the whole URI in $MLFLOW_BACKEND_STORE_URI)",
    )
    p.add_argument("--artifacts", help="folder the server keeps artifacts in (required)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (0.0.0.0: every interface; beyond loopback logins are on)",
    )
    p.add_argument("--port", type=int, default=5000)
    p.add_argument("--auth", action="store_true", help="logins on also on 127.0.0.1")
    p.add_argument(
        "--insecure", action="store_true", help="no logins beyond loopback (anyone gets in)"
    )
    p.add_argument(
        "--admin-password-file",
        help="file holding the admin's password (else $SPOREFLOW_SERVER_ADMIN_PASSWORD); "
        "needed the first time logins are on",
    )
    p.add_argument(
        "--home",
        default="sporeflow-server",
        help="folder for the server's own files: secret key, users (default: ./sporeflow-server)",
    )
    p.add_argument(
        "mlflow_args",
        nargs=argparse.REMAINDER,
        help="after --: more `mlflow server` options (e.g. -- --workers 4); or add-user NAME",
    )
    p.set_defaults(fn=server)


def _add_user_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sporeflow server add-user",
        description="Add a user to a running server with logins on, as its admin "
        "(MLFLOW_TRACKING_USERNAME=admin, MLFLOW_TRACKING_PASSWORD); the new password is read "
        "from a prompt or stdin.",
    )
    p.add_argument("name")
    p.add_argument("--url", required=True, help="the server, e.g. http://store:5000")
    p.add_argument("--viewer", action="store_true", help="reads every run, writes none")
    return p


def predict(args: argparse.Namespace) -> int:
    """A run's final weights on a folder of images or a .npy batch -> one CSV row per image."""
    _mindspore_log_off_console()  # no run dir
    from sporeflow.core.errors import ConfigError, DataError
    from sporeflow.job import predict as predicting
    from sporeflow.stage.source import resolve
    from sporeflow.storage.files import write_text_atomic
    from sporeflow.tracking.store_reads import StoreReads

    out = Path(args.out)
    try:
        if not out.parent.is_dir():
            raise DataError(f"--out {out}: folder {out.parent} does not exist")
        source = resolve(args.source, StoreReads.at(args.uri, args.experiment))
        cfg, images = predicting.checked_inputs(source, Path(args.images))
    except (ConfigError, DataError) as ex:
        print(f"sporeflow predict: {ex}", file=sys.stderr)
        return 2
    found = predicting.predict(cfg, source, images, progress=console.on_terminal())
    if found.caveat:
        print(f"[sporeflow] {found.caveat}", file=sys.stderr)
    replaced = " (it replaced the file there)" if out.exists() else ""
    write_text_atomic(out, predicting.csv_text(found))
    print(
        f"[sporeflow] {len(found.names)} images predicted by {source.name} "
        f"({cfg.model._target_.rsplit('.', 1)[-1]}, {found.probabilities.shape[1]} classes): "
        f"{out}{replaced}",
        file=sys.stderr,
    )
    return 0


def _predict_parser(sub) -> None:
    p = sub.add_parser(
        "predict",
        help="a run's network on your own images: class probabilities per image, as CSV",
        description="Each image goes through the eval transforms of the data set the source "
        "was trained on; the CSV has file, label (the most probable class) and p_<class>.",
    )
    p.add_argument(
        "source",
        help="a run dir, one of its stage dirs (.../stage2), a .ckpt/.safetensors in a run dir, an MLflow "
        "run id or models:/<name>/<version>",
    )
    p.add_argument(
        "images",
        help="a folder of .jpg/.jpeg/.png files (read recursively, in name order) or a .npy "
        "file of uint8 images N x H x W [x C] as the data set keeps them",
    )
    p.add_argument(
        "--out", default="predictions.csv", help="the CSV to write (default: %(default)s)"
    )
    _store_args(p)
    p.set_defaults(fn=predict)


def _merge_parser(sub) -> None:
    p = sub.add_parser(
        "merge-ckpt", help="merge sliced per-rank checkpoints into one full checkpoint"
    )
    p.add_argument("--src", required=True, help="folder with rank_<r>/ subfolders of .ckpt files")
    p.add_argument("--strategy", required=True, help="the strategy file of the sliced run")
    p.add_argument("--out", required=True, help="the merged .ckpt to write")
    p.set_defaults(fn=merge_ckpt)


def _sync_parser(sub) -> None:
    p = sub.add_parser(
        "sync",
        help="send tracking records a run kept in its journal (store busy or down, processes killed)",
    )
    p.add_argument("dir", help="a run dir or sweep dir (its tracking/*.jsonl journals are applied)")
    p.set_defaults(fn=sync)


def parser() -> argparse.ArgumentParser:
    """`sporeflow` and its sub-commands (each with its own --help)."""
    top = argparse.ArgumentParser(
        prog="sporeflow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = top.add_subparsers(dest="command", required=True)
    for add in (
        _compare_parser,
        _ui_parser,
        _server_parser,
        _predict_parser,
        _merge_parser,
        _sync_parser,
    ):
        add(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    telemetry.off_unless_chosen()
    args = parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
