"""What a sweep ranks its jobs by (and Optuna optimises): `sweep.objective`.

A job's objective is one number its top-level MLflow run reports: a pipeline's `stage2/acc`,
`gain`, `gain_at_cost` (stage 2 against the budget arm, when `boost.baselines` has it) or
`<stage>/<acc|loss>`; a plain training run's `acc` or `loss` (logged there as
`final/acc`, `final/loss`). `auto` is stage 2's accuracy for boost=dim_reduce, else `acc`.
Losses are minimised, everything else maximised.
"""

from __future__ import annotations

PLAIN = ("acc", "loss")


def allowed(dim_reduce: bool, baselines: list[str]) -> list[str]:
    if not dim_reduce:
        return ["auto", *PLAIN]
    stages = ["stage2", "stage1", *baselines]
    at_cost = ["gain_at_cost"] if "budget" in baselines else []
    return ["auto", "gain", *at_cost, *(f"{stage}/{m}" for stage in stages for m in PLAIN)]


def name(objective: str, dim_reduce: bool) -> str:
    """The objective as the job's result names it ("auto" made explicit)."""
    if objective == "auto":
        return "stage2/acc" if dim_reduce else "acc"
    return objective


def metric_key(objective: str, dim_reduce: bool) -> str:
    """The MLflow metric of the job's top-level run that holds the objective."""
    explicit = name(objective, dim_reduce)
    return explicit if dim_reduce else f"final/{explicit}"


def maximize(objective: str) -> bool:
    return not objective.endswith("loss")


def progress(objective: str, dim_reduce: bool) -> tuple[str, str] | None:
    """(stage, eval metric) that shows a job's objective while it trains, for pruning: stage 2's
    accuracy or loss for a pipeline ranked by stage 2 (or `gain`: stage 2 minus a baseline that
    its sweep does not vary), the training stage's for a plain job; None when the objective is
    only known at the end (a stage-1 or baseline metric: nothing to compare epoch by epoch)."""
    explicit = name(objective, dim_reduce)
    if not dim_reduce:
        return "train", explicit
    if explicit in ("gain", "gain_at_cost"):
        return "stage2", "acc"
    stage, _, metric = explicit.partition("/")
    return (stage, metric) if stage == "stage2" else None
