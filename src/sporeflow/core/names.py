"""Names that several modules write and read: the kinds of stage a job runs. One place, so a
writer and its readers cannot drift apart (a stage's MLflow run, its folder and its metrics'
prefix are all named by its kind)."""

from __future__ import annotations

from enum import Enum


class StageKind(str, Enum):
    """What a stage is in its job; the value names its MLflow run, its folder under the run dir
    and its metrics' prefix in a pipeline's parent (`val/stage2/acc`). A str: it equals, hashes
    and formats as its value (`__str__`/`__format__` below; enum.StrEnum needs Python 3.11), so
    a dict keyed by kind is read with the plain name and records written before read the same."""

    train = "train"  # a plain job's one stage
    stage1 = "stage1"  # dim-reduce stage 1: plain training that keeps weight snapshots
    stage2 = "stage2"  # dim-reduce stage 2: steps in the snapshots' PCA subspace
    baseline = "baseline"  # plain training continued from stage 1 for stage 2's epochs
    annealed = "annealed"  # the same at boost.anneal_factor x the rate
    snapshot_mean = "snapshot_mean"  # the mean of stage 1's snapshots, evaluated, not trained
    budget = "budget"  # plain training for what stage 2 spent, its rate decayed to zero

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)
