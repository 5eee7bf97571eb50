"""`sporeflow` console script: tools around runs (training itself is `python train.py`).

sporeflow compare [--uri URI] [--experiment NAME] [--last N] [--seeds [--plot PNG]]
                  [--sweep ID|latest] [--format text|csv|markdown]
sporeflow ui [--uri URI] [--experiment NAME] [--port P] [--sweep ID|latest] [--links-only]
sporeflow server --db postgresql://... --artifacts DIR [--host H] [--port P] [-- MLFLOW ARGS]
sporeflow merge-ckpt --src DIR --strategy FILE --out FILE
sporeflow sync DIR
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

from sporeflow.config.schema import TrackingConfig
from sporeflow.core import signals
from sporeflow.core.processes import start_group, stop_group

DEFAULT_EXPERIMENT = TrackingConfig.experiment_name  # the schema's default, written once there
STORE_HELP = "MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///./mlflow.db)"


def _open_experiment(args: argparse.Namespace):
    """(uri, MlflowClient, experiment) of --uri/--experiment, or None after saying what is missing."""
    from mlflow.tracking import MlflowClient

    from sporeflow.tracking.store import resolve_uri

    uri = resolve_uri(args.uri, Path.cwd())
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        print(f"no experiment {args.experiment!r} in {uri}", file=sys.stderr)
        return None
    return uri, client, exp


def compare(args: argparse.Namespace) -> int:
    """One row per dim_reduce pipeline: each stage's accuracy, the gain with its 95% interval and
    McNemar p-value; with --seeds, one row per configuration: mean +- sd over its seeds; with
    --sweep, one row per job of that sweep (plain runs too)."""
    from sporeflow.report import pipeline_table as table

    opened = _open_experiment(args)
    if opened is None:
        return 2
    uri, client, exp = opened
    if args.sweep:
        return compare_sweep(client, exp, uri, args)
    runs = client.search_runs(
        [exp.experiment_id],
        "tags.stage = 'pipeline'",
        max_results=args.last,
        order_by=["attributes.start_time DESC"],
    )
    if not runs:
        print("(no boost=dim_reduce pipelines yet)", file=sys.stderr)
        return 0
    if not args.seeds:
        print("\n".join(table.pipelines_table(runs)))
        return 0
    groups = table.seed_groups(runs)
    if args.plot:
        from sporeflow.report.comparison import seeds_plot

        if seeds_plot(table.seed_arms(groups), Path(args.plot)):
            print(f"plot: {args.plot}", file=sys.stderr)
    print("\n".join(table.seeds_table(groups)))
    return 0


def _sweep_run(client, exp, which: str):
    """The sweep parent run `which` names (a run id, or `latest`), or None."""
    if which != "latest":
        try:
            return client.get_run(which)
        except Exception:  # noqa: BLE001 - unknown id: the caller names it
            return None
    found = client.search_runs(
        [exp.experiment_id],
        "tags.stage = 'sweep'",
        max_results=1,
        order_by=["attributes.start_time DESC"],
    )
    return found[0] if found else None


def compare_sweep(client, exp, uri: str, args: argparse.Namespace) -> int:
    """One row per job of one sweep, best first by its objective, swept keys as columns; as
    text, first one row per point (the jobs' settings but the seed) and the verdict last."""
    from sporeflow.report import sweep_report as report
    from sporeflow.tracking.tracker import Tracker

    run = _sweep_run(client, exp, args.sweep)
    if run is None or run.data.tags.get("stage") != "sweep":
        print(
            f"--sweep {args.sweep}: no sweep run in experiment {args.experiment!r} "
            "(sweeps are `python train.py -m ...`; `latest` picks the newest)",
            file=sys.stderr,
        )
        return 2
    tags = run.data.tags
    keys = [k for k in tags.get("sweep.keys", "").split(",") if k]
    tracker = Tracker(uri, args.experiment)
    jobs = report.sweep_jobs(tracker, run.info.run_id, keys)
    key = report.objective_key(jobs, tags.get("sweep.objective", "auto"))
    ranked = report.ranked(jobs, key)
    header, rows = report.table_rows(ranked, keys)
    if args.format == "text":
        print(
            f"sweep {run.data.tags.get('mlflow.runName', '')} ({run.info.run_id}, {run.info.status}): "
            f"{len(jobs)} jobs, best first by {key}",
            file=sys.stderr,
        )
    decision = report.sweep_decision(tracker, ranked, keys, key)
    if args.format == "text" and decision is not None:  # one row per point, its jobs below
        print(report.render(*decision.rows(key)))
    print(report.render(header, rows, args.format), end="")
    if args.format == "text" and decision is not None:
        print(decision.line(key))  # the same verdict the sweep ended with, from the same store
    return 0


def ui(args: argparse.Namespace) -> int:
    """Serve the store with `mlflow server` on 127.0.0.1 and print links into its ML view."""
    from sporeflow.report.sweep_report import ui_links

    opened = _open_experiment(args)
    if opened is None:
        return 2
    uri, client, exp = opened
    base = f"http://127.0.0.1:{args.port}"
    sweep = _sweep_run(client, exp, args.sweep)
    jobs = (
        client.search_runs(
            [exp.experiment_id], f"tags.`sweep.run_id` = '{sweep.info.run_id}'", max_results=200
        )
        if sweep is not None
        else []
    )
    for label, link in ui_links(base, exp.experiment_id, sweep, jobs):
        print(f"{label:12s} {link}")
    if args.links_only:
        return 0
    server = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--backend-store-uri",
        uri,
        "--host",
        "127.0.0.1",
        "--port",
        str(args.port),
        "--workers",
        "1",  # one user's browser on this machine
    ]
    print(f"serving {uri} at {base} (Ctrl-C stops it)", file=sys.stderr)
    return _serve(server)


def server_env() -> dict[str, str]:
    """`mlflow server`'s environment: MLflow's job runner (GenAI jobs and trace rollups, idle
    consumers polling all the time) off unless the user turned it on; sporeflow needs none."""
    return {"MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false", **os.environ}


def _serve(command: list[str]) -> int:
    """Run `mlflow server` until it ends or Ctrl-C / SIGTERM, which stop it and every worker."""
    signals.install()
    proc = start_group(command, env=server_env())
    try:
        return proc.wait()
    except signals.Interrupted as ex:
        stop_group(proc, ex.signum, grace=10.0)
        return ex.exit_code


def server(args: argparse.Namespace) -> int:
    """A team's store: `mlflow server` over a database (PostgreSQL), artifacts served from a
    folder, so every machine needs only tracking.uri=http://<host>:<port>."""
    from sporeflow.core.uris import database_problem, is_database, redacted

    if not is_database(args.db):
        print(
            f"--db {args.db}: not a database URI; give postgresql://user:password@host:port/db",
            file=sys.stderr,
        )
        return 2
    problem = database_problem(args.db)
    if problem:
        print(f"--db {redacted(args.db)}: cannot connect: {problem}", file=sys.stderr)
        return 2
    artifacts = Path(args.artifacts).resolve()
    artifacts.mkdir(parents=True, exist_ok=True)
    command = [
        str(Path(sys.executable).parent / "mlflow"),
        "server",
        "--backend-store-uri",
        args.db,
        "--artifacts-destination",
        str(artifacts),
        "--serve-artifacts",
        "--host",
        args.host,
        "--port",
        str(args.port),
        *(args.mlflow_args[1:] if args.mlflow_args[:1] == ["--"] else args.mlflow_args),
    ]
    shown = args.host if args.host not in ("0.0.0.0", "::") else "<this machine's name>"
    print(
        f"serving {redacted(args.db)} with artifacts in {artifacts} at http://{args.host}:{args.port}"
        f" (Ctrl-C stops it); on every machine: tracking.uri=http://{shown}:{args.port}",
        file=sys.stderr,
    )
    return _serve(command)


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
    from sporeflow.tracking.sync import sync_journal

    root = Path(args.dir)
    journals = journals_under(root) if root.is_dir() else []
    if not journals:
        print(
            f"{root}: no tracking journal under it (a run dir or sweep dir holds tracking/*.jsonl)",
            file=sys.stderr,
        )
        return 2
    code = 0
    for journal in journals:
        done = sync_journal(journal)
        where = (
            done.journal.relative_to(root) if done.journal.is_relative_to(root) else done.journal
        )
        if done.busy:
            print(f"{where}: its writer is still running ({done.left} records to go); left to it")
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


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--uri", help=STORE_HELP)
    p.add_argument("--experiment", default=DEFAULT_EXPERIMENT)


def _compare_parser(sub) -> None:
    p = sub.add_parser("compare", help="stage accuracies and gain of every dim_reduce pipeline")
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
        metavar="ID|latest",
        help="one sweep's jobs (its parent run id, or latest): best first, swept keys as columns",
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
        "--sweep", metavar="ID|latest", default="latest", help="the sweep the links open"
    )
    p.add_argument("--links-only", action="store_true", help="print the links, start no server")
    p.set_defaults(fn=ui)


def _server_parser(sub) -> None:
    p = sub.add_parser(
        "server",
        help="a team's store: mlflow server over PostgreSQL, artifacts served from a folder",
        description=server.__doc__,
    )
    p.add_argument("--db", required=True, help="postgresql://user:password@host:port/database")
    p.add_argument("--artifacts", required=True, help="folder the server keeps artifacts in")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)"
    )
    p.add_argument("--port", type=int, default=5000)
    p.add_argument(
        "mlflow_args",
        nargs=argparse.REMAINDER,
        help="after --: more `mlflow server` options (e.g. -- --allowed-hosts host:5000)",
    )
    p.set_defaults(fn=server)


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
    for add in (_compare_parser, _ui_parser, _server_parser, _merge_parser, _sync_parser):
        add(sub)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
