"""A trial of several seeds (`hydra.sweeper.seeds`): its jobs, their numbers, and the one value
it reports to the study.

On a task where settings differ by less than the seed-to-seed noise, a search that optimises
one seed's result climbs the noise. With seeds a trial is one job per seed (`seed=<s>` after
its parameters) and tells the study one value over them (`seed_statistic`):

- `mean`: the mean of the seeds' objectives;
- `lcb`: the pessimistic end of the mean's 95% t interval over the seeds, mean - t * sd / sqrt(k)
  for a maximised objective (its lower bound), mean + t * sd / sqrt(k) for a minimised one: a
  setting that is good on average but erratic across seeds ranks below a steady one.

A trial's jobs are numbered `trial * k + i` (the i-th seed), so that the job numbers of the
trials of one study, asked by any number of processes, never collide.
"""

# (no `from __future__ import annotations`: see optuna_sweeper.py)
import math
from typing import List, Optional, Sequence

from hydra_plugins.sporeflow_optuna_sweeper.results import Outcome


def jobs_per_trial(seeds: Optional[Sequence[int]]) -> int:
    return len(seeds) if seeds else 1


def first_job(trial_number: int, seeds: Optional[Sequence[int]]) -> int:
    return trial_number * jobs_per_trial(seeds)


def with_seeds(overrides: List[str], seeds: Optional[Sequence[int]]) -> List[List[str]]:
    """A trial's jobs: its overrides, once per seed (`seed=<s>` last) or once without seeds."""
    if not seeds:
        return [overrides]
    return [[*overrides, f"seed={seed}"] for seed in seeds]


def trial_value(values: Sequence[float], statistic: str, maximize: bool) -> float:
    """The value a trial of seeds tells the study (module docstring); one value is itself."""
    k = len(values)
    mean = math.fsum(values) / k
    if statistic == "mean" or k < 2:
        return mean
    from scipy.stats import t

    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (k - 1))
    half = float(t.ppf(0.975, k - 1)) * sd / math.sqrt(k)
    return mean - half if maximize else mean + half


def combined(outcomes: list, seeds: Optional[Sequence[int]], statistic: str, maximize):
    """A trial's outcome from its jobs': the first seed's failure (or pruning) if any, else the
    statistic over their values. `maximize`: a bool, or one per direction (a multi-objective
    study's values are combined one objective at a time, each its own way)."""
    ways = list(maximize) if isinstance(maximize, (list, tuple)) else [maximize]
    if len(outcomes) == 1:
        return outcomes[0]
    for seed, outcome in zip(seeds, outcomes, strict=True):
        if outcome.value is None:
            return Outcome(None, f"seed {seed}: {outcome.error}", outcome.traceback, outcome.pruned)
    values = [o.value for o in outcomes]
    if isinstance(values[0], list):
        return Outcome(
            [trial_value([v[i] for v in values], statistic, up) for i, up in enumerate(ways)]
        )
    return Outcome(trial_value(values, statistic, ways[0]))
