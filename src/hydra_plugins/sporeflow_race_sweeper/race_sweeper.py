"""A Hydra Sweeper that races a grid over seeds: `hydra/sweeper=sporeflow_race`
(`hparams_search=dim_reduce_race`).

Round r runs every point still in on seed r (`seed=<s>` after the point's settings, the points
of a round launched together: side by side with a joblib or submitit launcher); from round
`first_test` on, the points shown worse than the best are dropped (elimination.py: Friedman and
Conover, Wilcoxon for two) and run no more seeds. The race ends when one point is left or
`max_seeds` seeds are run. A point whose job fails leaves the race, named; the sweep then exits
non-zero. Job numbers run on across rounds (round 1: 0..n-1, ...).

`<sweep dir>/race.csv` has a row per job (round, seed, job, point, value, state: ran | failed)
and a row per drop; the console a line per round and the race's end. The sweep's MLflow parent
(entry.sweep_run) then decides between the points left and dropped on their per-image outcomes,
as for any sweep.
"""

# (no `from __future__ import annotations`: Hydra imports plugin modules without putting them
# in sys.modules, and dataclasses cannot then resolve string annotations)
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
from omegaconf import DictConfig, OmegaConf

from hydra_plugins.sporeflow_optuna_sweeper.launching import LaunchingSweeper, register
from hydra_plugins.sporeflow_optuna_sweeper.results import outcome, write_csv
from hydra_plugins.sporeflow_race_sweeper.elimination import Round, judge
from sporeflow.config import race
from sporeflow.config.facts import sweep_direction
from sporeflow.core.errors import SporeflowError

RACE_FILE = "race.csv"


@dataclass
class SporeflowRaceSweeperConf:
    """`hydra/sweeper=sporeflow_race`: F-race over a grid of points, a seed per round."""

    _target_: str = "hydra_plugins.sporeflow_race_sweeper.race_sweeper.RaceSweeper"
    max_seeds: int = 5
    """Rounds at most: round r runs seed first_seed + r - 1 on every point still in."""
    first_seed: int = 1
    """The seed of round 1."""
    first_test: int = 2
    """The first round after which points can be dropped (F-race tests from then on)."""
    alpha: float = 0.05
    """A point is dropped when shown worse than the best at this level."""
    direction: Optional[str] = None
    """`maximize` or `minimize`; null: from the app's `sweep.objective` (a loss is minimised)."""
    params: Optional[Dict[str, Any]] = field(default_factory=dict)
    """The grid: keys with `choice(...)`, `a,b,c` or `range(a, b)` (the Optuna sweeper's
    syntax); the command line's sweeps are added."""


register("sporeflow_race", SporeflowRaceSweeperConf)


class RaceJobsFailed(SporeflowError):
    """Some points' jobs failed: they left the race, which went on without them."""


class RaceSweeper(LaunchingSweeper):
    option = "hydra/sweeper=sporeflow_race"

    def __init__(self, **settings: Any) -> None:
        settings.pop("_target_", None)
        params = settings.get("params")
        if isinstance(params, DictConfig):
            settings["params"] = OmegaConf.to_container(params)
        self.settings = settings

    def sweep(self, arguments: List[str]) -> Any:
        self.refuse_choice_on_test()
        plan = race.checked(self.settings, arguments)
        sweep_dir = Path(self.config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
        direction = self.settings.get("direction") or sweep_direction(self.config)
        state = _Race(plan, direction == "maximize", sweep_dir)
        print(
            f"[sporeflow] race of {len(plan.points)} points over seeds "
            f"{plan.seeds[0]}..{plan.seeds[-1]} ({direction})",
            file=sys.stderr,
        )
        batches = []
        for number, seed in enumerate(plan.seeds, 1):
            alive = list(state.alive)
            returns = self.launcher.launch(
                [[*plan.space.job_overrides(plan.points[p]), f"seed={seed}"] for p in alive],
                initial_job_idx=state.jobs,
            )
            batches.append(returns)
            state.ran(number, seed, alive, returns)
            testing = number >= self.settings["first_test"]
            state.judge(number, seed, self.settings["alpha"] if testing else None)
            if len(state.alive) <= 1:
                break
        print(f"[sporeflow] {state.end_line()}", file=sys.stderr)
        if state.failed:
            raise RaceJobsFailed("; ".join(state.failed))
        return batches


class _Race:
    """The race so far: the points still in, each point's value per seed, the rows of race.csv."""

    def __init__(self, plan: "race.Race", maximize: bool, sweep_dir: Path) -> None:
        self.plan, self.maximize, self.sweep_dir = plan, maximize, sweep_dir
        self.alive: List[int] = list(range(len(plan.points)))
        self.values: Dict[int, Dict[int, float]] = {p: {} for p in self.alive}  # point -> seed
        self.rows: List[dict] = []
        self.failed: List[str] = []
        self.jobs = 0
        self.rounds = 0

    def label(self, point: int) -> str:
        return " ".join(f"{k}={v}" for k, v in self.plan.points[point].items()) or "(defaults)"

    def ran(self, number: int, seed: int, alive: List[int], returns: list) -> None:
        """Record a round's jobs; a point whose job failed leaves the race."""
        self.rounds = number
        for point, ret in zip(alive, returns, strict=False):
            result = outcome(ret)
            self._row(number, seed, self.jobs, point, result.value, result.state, result.error)
            if result.value is None:
                self.failed.append(
                    f"job {self.jobs} ({self.label(point)}, seed {seed}): {result.error}"
                )
                self.alive.remove(point)
            else:
                self.values[point][seed] = result.value
            self.jobs += 1
        self._write()

    def judge(self, number: int, seed: int, alpha: Optional[float]) -> None:
        """Drop the points the round's test shows worse (no test before `first_test`: alpha
        None); print the round's line."""
        seeds = sorted({s for p in self.alive for s in self.values[p]})
        seeds = [s for s in seeds if all(s in self.values[p] for p in self.alive)]
        matrix = np.array([[self.values[p][s] for p in self.alive] for s in seeds])
        verdict = (
            judge(matrix, self.maximize, alpha) if alpha else Round(list(range(len(self.alive))))
        )
        dropped = [self.alive[j] for j in verdict.dropped]
        for j, point in zip(verdict.dropped, dropped, strict=True):
            p = verdict.pairwise[j]
            posthoc = "Conover" if verdict.test == "Friedman" else verdict.test
            self._row(number, seed, "", point, None, "dropped", f"{posthoc} p={p:.3g} vs the best")
        self.alive = [self.alive[j] for j in verdict.kept]
        test = f"{verdict.test} p={verdict.p_value:.3g}" if verdict.test else "no test yet"
        gone = ", ".join(self.label(p) for p in dropped) or "none"
        print(
            f"[sporeflow] race round {number} (seed {seed}): {len(self.alive) + len(dropped)} "
            f"points, {test}; dropped: {gone}",
            file=sys.stderr,
        )
        self._write()

    def end_line(self) -> str:
        left = ", ".join(self.label(p) for p in self.alive) or "none"
        if len(self.alive) == 1:
            return f"race: {left} is left after {self.rounds} rounds"
        return f"race: {len(self.alive)} points left after {self.rounds} rounds: {left}"

    def _row(self, number, seed, job, point, value, state, note) -> None:
        self.rows.append(
            {
                "round": number,
                "seed": seed,
                "job": job,
                "point": self.label(point),
                "value": "" if value is None else value,
                "state": {"COMPLETE": "ran", "FAIL": "failed"}.get(state, state),
                "note": note,
            }
        )

    def _write(self) -> None:
        write_csv(self.sweep_dir / RACE_FILE, self.rows)
