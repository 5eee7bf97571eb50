"""A race against the full grid, on Fashion-MNIST (issue 33; BENCHMARKS table 15).

LeNet-5 on 12,000 Fashion-MNIST training images (the 10,000-image test split), stage 1 8 epochs
with snapshots from epoch 4, stage 2 2 epochs; the grid rho 0.4,0.55,0.7 x sigma 0.2,0.4 (6
points). In one launch folder (one MLflow store):

1. the full grid over seeds 1-5 (`seed=1,2,3,4,5`): 30 jobs, stage 1 and the baseline trained
   once per seed;
2. the race of the same grid (`hparams_search=dim_reduce_race`, max_seeds 5,
   `sweep.skip_finished=false`): it reuses each seed's stage 1 and baseline from (1), so its
   cost is the stage-2 runs it needs;
3. seed 1 alone (the grid's seed-1 jobs), decided as a one-seed sweep would;
4. the grid over seeds 6-8, which took no part: does the 5-seed leader lead there too?

Each decision is sporeflow's own (report.decision, Holm over points, on stage 2's per-image
outcomes). Usage: python bench/bench_race.py   (about 40 min here)
"""

from __future__ import annotations

import csv
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

from sporeflow.report.decision import Point, decide
from trainjob import run_train, runs

GRID = ["boost.rho=0.4,0.55,0.7", "boost.sigma=0.2,0.4"]
BASE = [
    "experiment=lenet_fashion_mnist",
    "boost=dim_reduce",
    "dataset.num_samples=12000",
    "epochs=8",
    "boost.epochs=2",
    "boost.n_component=16",
    "boost.snapshot.start_epoch=4",
    "boost.snapshot.per_epoch=4",
    "boost.baselines=[annealed]",
    "callbacks.progress_bar=false",
]


def sweep(launch: Path, name: str, args: list[str]) -> float:
    """Wall seconds of one sweep; a sweep this launch folder already has is not run again (its
    time kept in walls.json), so that a second call only prints."""
    import json

    walls_file = launch / "walls.json"
    walls = json.loads(walls_file.read_text()) if walls_file.is_file() else {}
    if name not in walls:
        start = time.perf_counter()
        run_train(["-m", *BASE, *args, f"hydra.sweep.dir={launch}/{name}"], launch)
        walls[name] = time.perf_counter() - start
        walls_file.write_text(json.dumps(walls))
    return walls[name]


def stage2_points(launch: Path, sweep_dir: str, seeds: set[int]) -> list[Point]:
    """The sweep's points over `seeds`, from each job's stage-2 per-image outcomes."""
    client, found = runs(launch)
    points: dict[str, Point] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for run in found:
            tags, params = run.data.tags, run.data.params
            if tags.get("stage") != "pipeline":
                continue
            if not tags.get("run_dir", "").startswith(str(launch / sweep_dir)):
                continue
            seed = int(params["seed"])
            if seed not in seeds:
                continue
            label = f"rho={params['boost.rho']} sigma={params['boost.sigma']}"
            path = client.download_artifacts(
                run.info.run_id, "predictions/stage2/predictions.npy", tmp
            )
            point = points.setdefault(label, Point(label))
            point.jobs[seed] = int(tags.get("sweep.job", -1))
            point.outcomes[seed] = np.load(path, allow_pickle=False)
    return list(points.values())


def decided(points: list[Point]) -> str:
    decision = decide(points)
    return decision.line("stage2/acc") if decision else "no decision"


def point_table(points: list[Point]) -> list[str]:
    """The decision's table (report.decision.Decision.rows), one line a point, best first."""
    from sporeflow.report.sweep_report import render

    decision = decide(points)
    if decision is None:
        return ["no decision"]
    header, rows = decision.rows("stage2/acc")
    return render(header, rows).splitlines()


def race_rows(launch: Path) -> list[dict]:
    with open(launch / "race" / "race.csv", newline="") as f:
        return list(csv.DictReader(f))


def main() -> None:
    launch = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="race-"))
    launch.mkdir(parents=True, exist_ok=True)
    walls = {
        "grid, seeds 1-5": sweep(launch, "grid", [*GRID, "seed=1,2,3,4,5"]),
        # the race's jobs are the grid's (same point and seed): sweep.skip_finished would copy
        # them; trained, they show what a race costs on its own
        "race, seeds 1-5 at most": sweep(
            launch,
            "race",
            [
                "hparams_search=dim_reduce_race",
                "hydra.sweeper.max_seeds=5",
                "sweep.skip_finished=false",
            ],
        ),
        "grid, seeds 6-8": sweep(launch, "holdout", [*GRID, "seed=6,7,8"]),
    }
    rows = race_rows(launch)
    ran = [r for r in rows if r["state"] == "ran"]
    print(
        f"LeNet-5 / Fashion-MNIST (12,000 training, 10,000 test images), 6 points "
        f"(rho x sigma), {os.cpu_count()} cores; launch folder {launch}"
    )
    print(f"  {'sweep':26s} {'wall s':>7s} {'stage-2 runs':>13s}")
    print(f"  {'grid, seeds 1-5':26s} {walls['grid, seeds 1-5']:7.1f} {30:13d}")
    print(
        f"  {'race, seeds 1-5 at most':26s} {walls['race, seeds 1-5 at most']:7.1f} {len(ran):13d}"
    )
    print(f"  {'grid, seeds 6-8':26s} {walls['grid, seeds 6-8']:7.1f} {18:13d}")
    print("  race, round by round:")
    for number in sorted({int(r["round"]) for r in rows}):
        inside = [r for r in rows if int(r["round"]) == number]
        dropped = [f"{r['point']} ({r['note']})" for r in inside if r["state"] == "dropped"]
        print(
            f"    round {number}: {sum(r['state'] == 'ran' for r in inside)} points ran; "
            f"dropped: {', '.join(dropped) or 'none'}"
        )
    print("  decisions (stage 2's per-image outcomes, Holm over points, 5%):")
    for label, folder, seeds in (
        ("full grid, seeds 1-5", "grid", {1, 2, 3, 4, 5}),
        ("race, the seeds each ran", "race", {1, 2, 3, 4, 5}),
        ("seed 1 alone", "grid", {1}),
        ("held out, seeds 6-8", "holdout", {6, 7, 8}),
    ):
        points = stage2_points(launch, folder, seeds)
        print(f"    {label}: {decided(points)}")
        if folder != "race":  # the race ran the grid's jobs: the same table
            print("\n".join(f"      {line}" for line in point_table(points)))


if __name__ == "__main__":
    main()
