"""What a sweep ranks its jobs by (and Optuna optimises): `sweep.objective`.

A job's objective is one number its top-level MLflow run reports, always on the validation
split (a choice is never scored on the test images that report the result): a pipeline's
`val/stage2/acc`, `val/gain`, `val/gain_at_cost` (stage 2 against the budget arm, when
`boost.baselines` has it) or `val/<stage>/<acc|loss>`; a plain training run's `val/acc` or
`val/loss` (its exported weights, logged there as `final/val/acc`, `final/val/loss`). `auto`
is stage 2's validation accuracy for boost=dim_reduce, else `val/acc`. The names written
before the validation split (`acc`, `stage2/acc`, `gain`, ...) stand for their `val/` ones.
Losses are minimised, everything else maximised.
"""

from __future__ import annotations

PLAIN = ("acc", "loss")
VAL, TEST = "val/", "test/"


def allowed(dim_reduce: bool, baselines: list[str]) -> list[str]:
    """The objectives a job can rank by, as users write them."""
    if not dim_reduce:
        return ["auto", *(VAL + m for m in PLAIN)]
    stages = ["stage2", "stage1", *baselines]
    at_cost = ["gain_at_cost"] if "budget" in baselines else []
    named = ["gain", *at_cost, *(f"{stage}/{m}" for stage in stages for m in PLAIN)]
    return ["auto", *(VAL + n for n in named)]


def refusal(objective: str, dim_reduce: bool, baselines: list[str]) -> str | None:
    """Why `objective` cannot rank jobs (None: it can); a `test/` one is named as such."""
    choices = allowed(dim_reduce, baselines)
    if name(objective, dim_reduce) in choices:
        return None
    if objective.startswith(TEST):
        return (
            f"sweep.objective={objective!r}: a choice is scored on the validation split, never "
            f"on the test images that report it; use {VAL + objective[len(TEST) :]!r} "
            f"(allowed: {', '.join(choices)})"
        )
    return f"sweep.objective={objective!r}; allowed: {', '.join(choices)}"


def name(objective: str, dim_reduce: bool) -> str:
    """The objective as the job's result names it: "auto" made explicit, an old name (`acc`,
    `gain`, `stage2/acc`) given its `val/` prefix."""
    if objective == "auto":
        return VAL + ("stage2/acc" if dim_reduce else "acc")
    if objective.startswith((VAL, TEST)):
        return objective
    return VAL + objective


def metric_key(objective: str, dim_reduce: bool) -> str:
    """The MLflow metric of the job's top-level run that holds the objective."""
    explicit = name(objective, dim_reduce)
    return explicit if dim_reduce else f"final/{explicit}"


def maximize(objective: str) -> bool:
    return not objective.endswith("loss")


def progress(objective: str, dim_reduce: bool) -> tuple[str, str] | None:
    """(stage, validation metric) that shows a job's objective while it trains, for pruning:
    stage 2's accuracy or loss for a pipeline ranked by stage 2 (or `gain`: stage 2 minus a
    baseline that its sweep does not vary), the training stage's for a plain job; None when
    the objective is only known at the end (a stage-1 or baseline metric: nothing to compare
    epoch by epoch)."""
    explicit = name(objective, dim_reduce)[len(VAL) :]
    if not dim_reduce:
        return "train", explicit
    if explicit in ("gain", "gain_at_cost"):
        return "stage2", "acc"
    stage, _, metric = explicit.partition("/")
    return (stage, metric) if stage == "stage2" else None
