"""The winner's curse in a null sweep, chosen on test (before issue 61) or on validation (issue 61;
BENCHMARKS table 19), and what holding out a validation split costs.

LeNet-5 on a subset of Fashion-MNIST (`experiment=lenet_fashion_mnist`, Debian's
`dataset-fashion-mnist`; `dataset.num_samples` caps the training and the test split alike),
`epochs` epochs. A pool of M trainings that differ only in the training `seed` (the held-out
validation images are the same for all: `dataset.split_seed` is not the training seed), each
with `dataset.val_split=0.1`. From each run's files (in its run dir, where a plain run's stage
writes them):

- validation: `predictions.npy`, right/wrong per validation image;
- "test": the even-indexed images of `test_predictions.npy`, what a sweep reports;
- "unseen": the odd-indexed ones, images that no rule below reads.

A null sweep draws k of the M runs without replacement (numpy's rng); its winner is the run
with the highest accuracy on "test" (the rule before issue 61: the images that report also
choose) or on validation (the rule now). Its bias is the winner's "test" accuracy minus its
"unseen" accuracy; "no choice" is the same difference averaged over every run of the pool (the
two halves' own difference in difficulty, which no rule causes). R draws; each mean is given
with a 95% interval from a bootstrap over the M trainings (the draws share the pool, so an
interval over the draws alone would be too narrow).

Cost: the same M seeds trained again with `dataset.val_split=0` (every training image trains);
the paired mean of (val_split=0.1 minus val_split=0) accuracy on the whole test split, with a
95% t interval over the seeds.

The runs go through `sporeflow.run` in this process (one graph compile for all of them) in a
temporary launch folder, tracking off. Usage:
    python bench/bench_selection_bias.py [--runs 12] [--k 4] [--draws 200] [--epochs 2]
        [--samples 20000] [--quick]
(--quick: 4 runs, 1 epoch, 2000 images, 20 draws: that it works, not a figure)
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

BASE = [
    "experiment=lenet_fashion_mnist",
    "callbacks.progress_bar=false",
    "callbacks.best.keep=0",
    "tracking.enabled=false",
]


def outcomes(run_dir: Path) -> dict[str, np.ndarray]:
    """A plain run's right/wrong per image: validation, and its test split's two halves."""
    (val,) = sorted(run_dir.rglob("predictions.npy"), key=lambda p: len(p.parts))[:1]
    test = np.load(val.parent / "test_predictions.npy", allow_pickle=False).astype(bool)
    return {
        "val": np.load(val, allow_pickle=False).astype(bool),
        "test": test[0::2],
        "unseen": test[1::2],
        "whole": test,
    }


def train(launch: Path, seed: int, val_split: float, epochs: int, samples: int) -> dict:
    import sporeflow

    os.chdir(launch)
    start = time.perf_counter()
    result = sporeflow.run(
        [
            *BASE,
            f"seed={seed}",
            f"epochs={epochs}",
            f"dataset.num_samples={samples}",
            f"dataset.val_split={val_split}",
            f"hydra.run.dir={launch}/runs/s{seed}_v{val_split}",
        ]
    )
    found = outcomes(Path(result.run_dir))
    wall = time.perf_counter() - start
    print(
        f"  seed {seed} val_split={val_split}: val {found['val'].mean():.4f} "
        f"({found['val'].size}), test {found['whole'].mean():.4f} ({found['whole'].size}), "
        f"{wall:.1f} s",
        file=sys.stderr,
        flush=True,
    )
    return found


def biases(acc: dict[str, np.ndarray], pool: np.ndarray, draws: np.ndarray) -> dict[str, float]:
    """Mean bias (winner's "test" minus its "unseen" accuracy) over `draws` (rows of indices
    into `pool`) for each rule, and with no choice."""
    test, unseen, val = (acc[s][pool] for s in ("test", "unseen", "val"))
    picked = {"test": test[draws], "val": val[draws]}
    out = {}
    for rule, scores in picked.items():
        winner = np.take_along_axis(draws, scores.argmax(axis=1)[:, None], axis=1)[:, 0]
        out[rule] = float(np.mean(test[winner] - unseen[winner]))
    out["none"] = float(np.mean(test - unseen))
    out["test - val"] = out["test"] - out["val"]
    return out


def interval(values: np.ndarray) -> tuple[float, float]:
    low, high = np.percentile(values, [2.5, 97.5])
    return float(low), float(high)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=12, help="M: trainings in the pool")
    parser.add_argument("--k", type=int, default=4, help="points per null sweep")
    parser.add_argument("--draws", type=int, default=200, help="R: null sweeps drawn")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--samples", type=int, default=20000, help="dataset.num_samples")
    parser.add_argument("--bootstrap", type=int, default=2000)
    parser.add_argument("--no-cost", action="store_true", help="skip the val_split=0 runs")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.runs, args.epochs, args.samples, args.draws, args.bootstrap = 4, 1, 2000, 20, 200
        args.k = min(args.k, 3)
    seeds = list(range(1, args.runs + 1))
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP", "/var/tmp")) as tmp:
        launch = Path(tmp)
        held = [train(launch, s, 0.1, args.epochs, args.samples) for s in seeds]
        whole = (
            [] if args.no_cost else [train(launch, s, 0, args.epochs, args.samples) for s in seeds]
        )
        os.chdir(REPO)
    wall = time.perf_counter() - start

    acc = {s: np.array([h[s].mean() for h in held]) for s in ("val", "test", "unseen", "whole")}
    rng = np.random.default_rng(0)
    m, k = len(held), args.k
    draws = np.stack([rng.choice(m, size=k, replace=False) for _ in range(args.draws)])
    found = biases(acc, np.arange(m), draws)
    boot = {key: [] for key in found}
    for _ in range(args.bootstrap):
        pool = rng.integers(0, m, size=m)
        for key, value in biases(acc, pool, draws).items():
            boot[key].append(value)

    n_val, n_test, n_unseen = (held[0][s].size for s in ("val", "test", "unseen"))
    print(
        f"null sweep: LeNet-5 / Fashion-MNIST, {args.samples} images, {args.epochs} epochs, "
        f"M={m} seeds, k={k} per sweep, R={args.draws} draws, {os.cpu_count()} cores, "
        f"{wall / 60:.1f} min"
    )
    print(
        f"  images: validation {n_val}, test (even) {n_test}, unseen (odd) {n_unseen}; "
        f"pool accuracy val {acc['val'].mean():.4f} (sd {acc['val'].std(ddof=1):.4f}), "
        f"test {acc['test'].mean():.4f} (sd {acc['test'].std(ddof=1):.4f})"
    )
    print("  winner's test minus unseen accuracy, mean (95% CI, bootstrap over trainings):")
    for key, label in (
        ("test", "chosen on test (before)"),
        ("val", "chosen on validation (now)"),
        ("none", "no choice (every run)"),
        ("test - val", "test rule minus validation rule"),
    ):
        low, high = interval(np.array(boot[key]))
        print(f"    {label:32s} {found[key]:+.4f} ({low:+.4f}..{high:+.4f})")
    agree = np.mean([acc["test"][d].argmax() == acc["val"][d].argmax() for d in draws])
    print(f"  the two rules pick the same run in {agree:.0%} of the draws")

    if whole:
        from scipy import stats

        diff = acc["whole"] - np.array([w["whole"].mean() for w in whole])
        half = stats.t.ppf(0.975, len(diff) - 1) * diff.std(ddof=1) / np.sqrt(len(diff))
        print(
            f"  holding out 10%: test accuracy with val_split=0.1 minus val_split=0, paired over "
            f"{len(diff)} seeds, {held[0]['whole'].size} test images: {diff.mean():+.4f} "
            f"(95% CI {diff.mean() - half:+.4f}..{diff.mean() + half:+.4f}); "
            f"val_split=0 mean {acc['whole'].mean() - diff.mean():.4f}"
        )


if __name__ == "__main__":
    main()
