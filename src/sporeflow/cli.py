"""`sporeflow` console script: tools around runs (training itself is `python train.py`).

    sporeflow compare [--uri URI] [--experiment NAME] [--last N]
    sporeflow merge-ckpt --src DIR --strategy FILE --out FILE
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from sporeflow.schema import Baseline

STAGES = ("stage1", "stage2", *(b.value for b in Baseline))


def compare(args: argparse.Namespace) -> int:
    """One row per dim_reduce pipeline: each stage's accuracy and the gain."""
    from mlflow.tracking import MlflowClient

    from sporeflow.tracking import resolve_uri

    uri = resolve_uri(args.uri, Path.cwd())
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(args.experiment)
    if exp is None:
        print(f"no experiment {args.experiment!r} in {uri}", file=sys.stderr)
        return 2
    runs = client.search_runs([exp.experiment_id], "tags.stage = 'pipeline'", max_results=args.last,
                              order_by=["attributes.start_time DESC"])
    header = f"{'run id':32s} {'status':9s} " + " ".join(f"{s:>13s}" for s in STAGES) + f" {'gain':>8s}  overrides"
    print(header)
    for run in runs:
        m = run.data.metrics
        cells = " ".join(f"{m[f'{s}/acc']:13.4f}" if f"{s}/acc" in m else f"{'-':>13s}" for s in STAGES)
        gain = f"{m['gain']:+8.4f}" if "gain" in m else f"{'-':>8s}"
        print(f"{run.info.run_id:32s} {run.info.status:9s} {cells} {gain}  {run.data.tags.get('overrides', '')}")
    if not runs:
        print("(no boost=dim_reduce pipelines yet)", file=sys.stderr)
    return 0


def merge_ckpt(args: argparse.Namespace) -> int:
    """Sliced per-rank checkpoints + the strategy file -> one full checkpoint."""
    import mindspore as ms

    from sporeflow.files import atomic_path

    src, strategy, out = Path(args.src), Path(args.strategy), Path(args.out)
    if not strategy.is_file():
        print(f"--strategy {strategy} does not exist (MindSpore writes it where "
              "parallel.strategy_ckpt_config.save_file says)", file=sys.stderr)
        return 2
    ranks = sorted(src.glob("rank_*")) if src.is_dir() else []
    if not any(list(r.glob("*.ckpt")) for r in ranks):
        print(f"--src {src} must hold rank_<r>/ folders with .ckpt files (run dir: checkpoints/)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(dir=out.parent if out.parent.exists() else None) as tmp:
        try:
            ms.transform_checkpoints(str(src), tmp, "merged", src_strategy_file=str(strategy), dst_strategy_file=None)
        except (ValueError, RuntimeError, TypeError) as ex:
            print(f"merge failed: {ex}", file=sys.stderr)
            return 1
        merged = next(Path(tmp, "rank_0").glob("*.ckpt"))
        with atomic_path(out) as partial:
            shutil.move(str(merged), partial)
    print(f"merged {len(ranks)} ranks into {out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sporeflow", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("compare", help="stage accuracies and gain of every dim_reduce pipeline")
    p.add_argument("--uri", help="MLflow store (default: $MLFLOW_TRACKING_URI or sqlite:///./mlflow.db)")
    p.add_argument("--experiment", default="sporeflow")
    p.add_argument("--last", type=int, default=20, help="how many pipelines, newest first")
    p.set_defaults(fn=compare)
    p = sub.add_parser("merge-ckpt", help="merge sliced per-rank checkpoints into one full checkpoint")
    p.add_argument("--src", required=True, help="folder with rank_<r>/ subfolders of .ckpt files")
    p.add_argument("--strategy", required=True, help="the strategy file of the sliced run")
    p.add_argument("--out", required=True, help="the merged .ckpt to write")
    p.set_defaults(fn=merge_ckpt)
    args = parser.parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
