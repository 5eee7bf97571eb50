"""Accuracy and cost together: the README's rho/sigma sweep, its front, and what Optuna's
samplers find of it in 12 trials (issue 63 item 7; BENCHMARKS table 20).

The README's dim-reduce sweep (`boost=dim_reduce boost.rho=0.4,0.55,0.7 boost.sigma=0.2,0.4`:
LeNet-5 on the digits set, the default job) with `sweep.objective=[val/stage2/acc,cost/passes]`
(a pipeline's `cost/passes` is its `stage2/passes`: the budget, snapshots and PCA included),
every point over the same training seeds. In one launch folder (one MLflow store: stage 1 and
the baselines of a seed are trained once and reused by every later sweep):

1. the grid over the seeds: its Pareto front (report.front: cheaper and not worse at 5%, or
   more accurate at 5% and no dearer, paired tests over the seeds, Holm);
2. for each sampler (TPE, NSGA-II, random) and each sampler seed, an Optuna study of the same
   6 settings (`boost.rho=choice(0.4,0.55,0.7)`, `boost.sigma=choice(0.2,0.4)`, gamma and alpha
   at their defaults, as in the grid), `hydra.sweeper.direction=[maximize,minimize]`,
   `hydra.sweeper.seeds=<the seeds>`: each trial one job per seed. A trial may repeat a
   setting (12 trials, 6 settings): it is trained again, as the study asked.

Every found point is one of the grid's, so what a sampler found is compared exactly: the grid
front's points it visited, those on its own front, and the hypervolume of its front (the
points on its front, pooled validation accuracy against cost, as its parent's front.csv has
them) over the grid front's, both against one reference point: the grid's worst accuracy and
highest cost, each pushed 10% of its range further (1 - the ratio is the area a sampler's
front leaves uncovered). Results are read with sporeflow's API (`sporeflow.results`).

Usage: python bench/bench_pareto_samplers.py [--seeds 1,2,3] [--trials 12] [--repeats 2]
           [--launch DIR] [--quick]
(--quick: seed 1, 4 trials: that it works, not a figure; --launch keeps the folder, and a
sweep it already holds is read, not run again)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")

OBJECTIVE = "sweep.objective=[val/stage2/acc,cost/passes]"
GRID = ["boost=dim_reduce", "boost.rho=0.4,0.55,0.7", "boost.sigma=0.2,0.4", OBJECTIVE]
STUDY = [
    "hparams_search=dim_reduce_optuna",
    "hydra.sweeper.direction=[maximize,minimize]",
    OBJECTIVE,
    "boost.rho=choice(0.4,0.55,0.7)",
    "boost.sigma=choice(0.2,0.4)",
    "~hydra.sweeper.params.boost.gamma",
    "~hydra.sweeper.params.boost.alpha",
]
SAMPLERS = {
    "TPE": ["hydra.sweeper.sampler=tpe"],  # n_startup_trials 4, as the preset has it
    "NSGA-II": [
        "hydra.sweeper.sampler={_target_: optuna.samplers.NSGAIISampler, population_size: 4}"
    ],
    "random": ["hydra.sweeper.sampler=random"],
}


def train_sweep(launch: Path, name: str, args: list[str]) -> float:
    """Wall seconds of `python train.py -m ARGS` into <launch>/<name> (its console in
    <launch>/<name>.log); a sweep the folder already finished is not run again."""
    walls_file = launch / "walls.json"
    walls = json.loads(walls_file.read_text()) if walls_file.is_file() else {}
    if name in walls:
        return walls[name]
    cmd = [sys.executable, str(REPO / "train.py"), "-m", *args, f"hydra.sweep.dir={launch}/{name}"]
    print(f"  {name}: {' '.join(cmd[2:])}", file=sys.stderr, flush=True)
    start = time.perf_counter()
    with open(launch / f"{name}.log", "w") as log:
        proc = subprocess.run(
            cmd,
            cwd=launch,
            env={**os.environ, "MLFLOW_TRACKING_URI": "", "PYTHONPATH": str(REPO / "src")},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    if proc.returncode:
        tail = (launch / f"{name}.log").read_text()[-3000:]
        raise RuntimeError(f"{name} exited {proc.returncode}:\n{tail}")
    walls[name] = time.perf_counter() - start
    walls_file.write_text(json.dumps(walls))
    print(f"  {name}: {walls[name]:.0f} s", file=sys.stderr, flush=True)
    return walls[name]


def results(launch: Path, name: str):
    """The sweep's SweepResults (sporeflow.results), its parent found by its sweep dir."""
    from mlflow.tracking import MlflowClient

    import sporeflow

    uri = f"sqlite:///{launch / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("sporeflow").experiment_id
    (parent,) = client.search_runs(
        [experiment], f"tags.`sweep.dir` = '{launch / name}' and tags.stage = 'sweep'"
    )
    return sporeflow.results(parent.info.run_id, uri=uri)


def setting(label: str) -> tuple[float, float]:
    """(rho, sigma) of a point's label (`boost.rho=0.4 boost.sigma=0.2`, keys in any order)."""
    found = dict(part.split("=", 1) for part in label.split())
    return float(found["boost.rho"]), float(found["boost.sigma"])


def hypervolume(points: list[tuple[float, float]], ref: tuple[float, float]) -> float:
    """The area that (accuracy, cost) points dominate up to `ref` (accuracy maximised down to
    ref[0], cost minimised up to ref[1])."""
    area, best = 0.0, ref[0]
    for acc, cost in sorted(points, key=lambda p: (p[1], -p[0])):
        if acc > best and cost < ref[1]:
            area += (acc - best) * (ref[1] - cost)
            best = acc
    return area


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="1,2,3", help="training seeds of every point")
    parser.add_argument("--trials", type=int, default=12, help="trials per study")
    parser.add_argument("--repeats", type=int, default=2, help="studies per sampler (seeds 1..)")
    parser.add_argument("--launch", default="", help="keep the launch folder here")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.trials, args.repeats = "1", 4, 1
    seeds = [int(s) for s in args.seeds.split(",")]
    launch = Path(
        args.launch or tempfile.mkdtemp(prefix="pareto-", dir=os.environ.get("BENCH_TMP"))
    )
    launch.mkdir(parents=True, exist_ok=True)
    seeds_arg = f"[{','.join(map(str, seeds))}]"
    start = time.perf_counter()
    walls = {"grid": train_sweep(launch, "grid", [*GRID, f"seed={','.join(map(str, seeds))}"])}
    studies = []
    for sampler, sampler_args in SAMPLERS.items():
        for repeat in range(1, args.repeats + 1):
            name = f"{sampler.lower().replace('-', '')}_s{repeat}"
            walls[name] = train_sweep(
                launch,
                name,
                [
                    *STUDY,
                    *sampler_args,
                    f"hydra.sweeper.n_trials={args.trials}",
                    f"hydra.sweeper.seeds={seeds_arg}",
                    f"hydra.sweeper.seed={repeat}",
                    f"hydra.sweeper.study_name={name}",
                ],
            )
            studies.append((sampler, repeat, name))
    wall = time.perf_counter() - start

    grid = results(launch, "grid")
    table = grid.front
    values = {setting(r.point): (r.acc, r.cost) for r in table.itertuples()}
    grid_front = {setting(r.point) for r in table.itertuples() if r.on_front}
    accs, costs = [a for a, _ in values.values()], [c for _, c in values.values()]
    ref = (
        min(accs) - 0.1 * ((max(accs) - min(accs)) or 0.01),
        max(costs) + 0.1 * ((max(costs) - min(costs)) or 1.0),
    )
    grid_hv = hypervolume([values[p] for p in grid_front], ref)
    print(
        f"accuracy and cost: the README's rho x sigma sweep (6 points, LeNet-5 / digits, "
        f"default dim-reduce job), seeds {args.seeds}, {os.cpu_count()} cores, {wall / 60:.1f} min "
        f"(sweeps read again from {launch} are not timed anew)"
    )
    print(
        f"  grid ({len(values) * len(seeds)} jobs, {walls['grid']:.0f} s): its points, cheapest first"
    )
    for r in table.itertuples():
        mark = "front" if r.on_front else f"beaten by {r.beaten_by} ({r.how}, p={r.p_holm:.3g})"
        print(
            f"    {r.point:32s} acc {r.acc:.4f} ({r.ci_low:.4f}..{r.ci_high:.4f}) cost {r.cost:7.2f}  {mark}"
        )
    print(
        f"  reference point: acc {ref[0]:.4f}, cost {ref[1]:.2f}; grid front hypervolume {grid_hv:.5f}"
    )
    print(
        f"  {'study':12s} {'trials':>6s} {'jobs':>5s} {'wall s':>7s} {'settings':>8s} "
        f"{'grid front visited':>18s} {'on its front':>12s} {'HV / grid':>9s}  its front"
    )
    for sampler, repeat, name in studies:
        found = results(launch, name)
        own = found.front
        visited = {setting(p) for p in own["point"]}
        front = [setting(r.point) for r in own.itertuples() if r.on_front]
        points = [(r.acc, r.cost) for r in own.itertuples() if r.on_front]
        ratio = hypervolume(points, ref) / grid_hv if grid_hv > 0 else float("nan")
        shown = "; ".join(f"rho={p[0]:g} sigma={p[1]:g}" for p in front)
        print(
            f"  {sampler + f' s{repeat}':12s} {args.trials:6d} {len(found.jobs):5d} "
            f"{walls[name]:7.0f} {len(visited):8d} "
            f"{f'{len(visited & grid_front)} of {len(grid_front)}':>18s} "
            f"{f'{len(set(front) & grid_front)} of {len(grid_front)}':>12s} {ratio:9.3f}  {shown}"
        )
        for p in visited:  # the same setting and seeds: the same values as the grid's
            acc, cost = next((r.acc, r.cost) for r in own.itertuples() if setting(r.point) == p)
            if abs(acc - values[p][0]) > 1e-9 or abs(cost - values[p][1]) > 1e-6:
                print(
                    f"    rho={p[0]:g} sigma={p[1]:g}: acc {acc:.4f} cost {cost:.2f} here, "
                    f"grid {values[p][0]:.4f} {values[p][1]:.2f}"
                )
    print(f"  grid front: {'; '.join(f'rho={p[0]:g} sigma={p[1]:g}' for p in sorted(grid_front))}")


if __name__ == "__main__":
    main()
