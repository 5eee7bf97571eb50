"""What a sweep ranks its jobs by (and Optuna optimises): `sweep.objective`.

A job's objective is one number its top-level MLflow run reports, always on the validation
split (a choice is never scored on the test images that report the result): a pipeline's
`val/stage2/acc`, `val/gain`, `val/gain_at_cost` (stage 2 against the budget arm, when
`boost.baselines` has it) or `val/<stage>/<acc|loss>`; a plain training run's `val/acc` or
`val/loss` (its exported weights, logged there as `final/val/acc`, `final/val/loss`). `auto`
is stage 2's validation accuracy for boost=dim_reduce, else `val/acc`. The names written
before the validation split (`acc`, `stage2/acc`, `gain`, ...) stand for their `val/` ones.
Losses are minimised, everything else maximised.

Two objectives, accuracy and cost: a list `[<objective above>, <cost>]` (a grid sweep, or an
Optuna study with `hydra.sweeper.direction` a list of the same length) ends with a Pareto front
(report.front). The cost is what the job's top-level run spent: a plain job's `cost/passes`, a
pipeline's `stage2/passes` (its stage 2 with stage 1's snapshots and the PCA: the budget its
budget arm is given). In a pipeline `cost/passes` is an alias of `stage2/passes` (ALIASES):
stage 2's run logs that same figure as its `cost/passes`, so the name a plain job uses means
the pipeline's cost; it is resolved once (`name`, `cost_of`) and only `stage2/passes` is
recorded and read. A cost is minimised; it is never first (the accuracy decides a single
winner, prunes, and is what a job returns first).
"""

from __future__ import annotations

from typing import Any

from sporeflow.core.names import StageKind

PLAIN = ("acc", "loss")
VAL, TEST = "val/", "test/"
COSTS = {False: ("cost/passes",), True: (f"{StageKind.stage2}/passes",)}  # by dim_reduce
ALL_COSTS = tuple(c for found in COSTS.values() for c in found)
# a pipeline's `cost/passes` is its `stage2/passes`: stage 2's own `cost/passes`, overhead included
ALIASES = {False: {}, True: {"cost/passes": "stage2/passes"}}  # by dim_reduce


EMA_SUFFIX = "_ema"  # a metric of the EMA weights (engine.callbacks.EvalEachEpoch)


def validation_metrics(ema: bool, dim_reduce: bool) -> list[str]:
    """What every training stage of a job records on the validation split at each evaluation
    (engine.callbacks.EvalEachEpoch), as `val/<name>`: acc and loss; with EMA weights kept
    (`train.ema.enabled`) also acc_ema and loss_ema - but not in a dim-reduce pipeline, whose
    stage 2 keeps no EMA weights. What a hook may watch (early stopping's `monitor`)."""
    names = [*PLAIN, *(m + EMA_SUFFIX for m in PLAIN if ema and not dim_reduce)]
    return [VAL + n for n in names]


def monitor_refusal(key: str, value: Any, recorded: list[str]) -> str | None:
    """Why `value` (set at `key`) is not one of the validation metrics `recorded`
    (validation_metrics; `acc` stands for `val/acc`); None when it is. A `test/` metric is named
    as such: a stage chooses on validation, the test split only reports."""
    if isinstance(value, str) and (value if value.startswith(VAL) else VAL + value) in recorded:
        return None
    allowed = f"allowed: {', '.join(recorded)}"
    if str(value).startswith(TEST):
        why = "a stage chooses on the validation split, never on the test images that report it"
    elif str(value).endswith(EMA_SUFFIX):
        why = "recorded with train.ema.enabled=true, outside a dim-reduce pipeline"
    else:
        why = "not a metric the stage records on the validation split"
    return f"{key}={value!r}: {why}; {allowed}"


def choice_on_test_refusal(cfg: Any, sweeper: str) -> str | None:
    """Why a sweeper that chooses between jobs by what each returns (`sweeper`, e.g.
    `hydra/sweeper=sporeflow_optuna`) cannot sweep this app: eval.py returns the accuracy on
    its `split`, and `split=test` would choose on the test images, as a `test/` sweep.objective
    of train.py would (refusal). None when it can (any other app or split); a sweep that
    chooses nothing (Hydra's basic sweeper: each source reported) is never asked."""
    split = getattr(cfg.get("split"), "value", cfg.get("split"))
    if "source" not in cfg.keys() or split != TEST.rstrip("/"):  # a swept source is missing
        return None
    return (
        f"split=test with {sweeper}: the sweep would choose by what eval.py returns, the "
        "accuracy on the test images that report the result (as sweep.objective=test/acc "
        "would for train.py); use split=val, or a plain -m sweep that reports each source "
        "and chooses none"
    )


def parts(objective: Any) -> list[str]:
    """`sweep.objective` as a list of names: a word is one; a list (or its text as a param
    records it, "['val/acc', 'cost/passes']") its elements."""
    if isinstance(objective, str):
        text = objective.strip()
        if text.startswith("[") and text.endswith("]"):
            return [p.strip().strip("'\"") for p in text[1:-1].split(",") if p.strip()]
        return [objective]
    return [str(p) for p in objective]


def primary(objective: Any) -> str:
    """What ranks, prunes and decides a single winner: the first (or only) objective."""
    found = parts(objective)
    return found[0] if found else "auto"


def cost_of(objective: Any, dim_reduce: bool) -> str:
    """The cost a two-objective sweep weighs the accuracy against, as the job's run records it
    (a pipeline's `cost/passes` is its `stage2/passes`); "" for one objective."""
    found = parts(objective)
    return name(found[1], dim_reduce) if len(found) == 2 and is_cost(found[1]) else ""


def is_cost(name: str) -> bool:
    return name in ALL_COSTS


def allowed(dim_reduce: bool, baselines: list[str], costs: bool = False) -> list[str]:
    """The objectives a job can rank by, as users write them; `costs`: with the cost a list's
    second element may name (`cost/passes`, a pipeline's `stage2/passes` or its alias)."""
    extra = [*COSTS[dim_reduce], *ALIASES[dim_reduce]] if costs else []
    if not dim_reduce:
        return ["auto", *(VAL + m for m in PLAIN), *extra]
    stages = [StageKind.stage2, StageKind.stage1, *baselines]
    at_cost = ["gain_at_cost"] if StageKind.budget in baselines else []
    named = ["gain", *at_cost, *(f"{stage}/{m}" for stage in stages for m in PLAIN)]
    return ["auto", *(VAL + n for n in named), *extra]


def refusal(objective: Any, dim_reduce: bool, baselines: list[str]) -> str | None:
    """Why `objective` cannot rank jobs (None: it can); a `test/` one is named as such. A list
    is `[<accuracy objective>]` or `[<accuracy objective>, <cost>]`."""
    if not isinstance(objective, str):
        return list_refusal(parts(objective), dim_reduce, baselines)
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


def list_refusal(objectives: list[str], dim_reduce: bool, baselines: list[str]) -> str | None:
    """Why a list objective cannot decide a sweep (None: it can)."""
    given = f"sweep.objective=[{','.join(objectives)}]"
    costs = ", ".join(
        [*COSTS[dim_reduce], *(f"{a} (an alias of {c})" for a, c in ALIASES[dim_reduce].items())]
    )
    shape = f"[<accuracy objective>, <cost: {costs}>]"
    if not objectives or len(objectives) > 2:
        return f"{given}: a list is {shape} (or one objective)"
    first, *rest = objectives
    if is_cost(first):
        return (
            f"{given}: a cost is never the first objective (the first ranks, prunes and "
            f"decides a winner); write {shape}"
        )
    found = refusal(first, dim_reduce, baselines)
    if found is not None:
        return found.replace(f"sweep.objective={first!r}", f"{given}: {first!r}", 1)
    if rest and not is_cost(rest[0]):
        return f"{given}: the second objective is a cost ({costs}); write {shape}"
    if rest and name(rest[0], dim_reduce) not in COSTS[dim_reduce]:
        kind = "a pipeline's" if dim_reduce else "a plain job's"
        return f"{given}: {rest[0]} is not {kind} cost; allowed: {costs}"
    return None


def direction_refusal(objectives: list[str], directions: list[str]) -> str | None:
    """Why an Optuna study's `hydra.sweeper.direction` list does not fit `sweep.objective`: one
    direction per objective, each the way that objective goes (an accuracy maximised, a loss or
    a cost minimised)."""
    given = f"hydra.sweeper.direction=[{','.join(directions)}]"
    if len(objectives) != len(directions):
        return (
            f"{given} has {len(directions)} direction"
            f"{'s' * (len(directions) != 1)}, sweep.objective=[{','.join(objectives)}] "
            f"{len(objectives)}: give one direction per objective"
        )
    for goal, direction in zip(objectives, directions, strict=True):
        way = _way(goal)
        if direction != way:
            return (
                f"{given}: sweep.objective's {goal} is {way[:-1]}ed, not {direction[:-1]}ed; "
                f"write hydra.sweeper.direction=[{','.join(_way(o) for o in objectives)}]"
            )
    return None


def _way(goal: str) -> str:
    return "maximize" if maximize(goal) else "minimize"


def name(objective: str, dim_reduce: bool) -> str:
    """The objective as the job's result names it: "auto" made explicit, an old name (`acc`,
    `gain`, `stage2/acc`) given its `val/` prefix; a cost's alias its cost (a pipeline's
    `cost/passes`: `stage2/passes`)."""
    if is_cost(objective):
        return ALIASES[dim_reduce].get(objective, objective)
    if objective == "auto":
        return VAL + (f"{StageKind.stage2}/acc" if dim_reduce else "acc")
    if objective.startswith((VAL, TEST)):
        return objective
    return VAL + objective


def metric_key(objective: str, dim_reduce: bool) -> str:
    """The MLflow metric of the job's top-level run that holds the objective."""
    explicit = name(objective, dim_reduce)
    return explicit if dim_reduce or is_cost(explicit) else f"final/{explicit}"


def maximize(objective: str) -> bool:
    return not objective.endswith("loss") and not is_cost(objective)


def progress(objective: str, dim_reduce: bool) -> tuple[str, str] | None:
    """(stage, validation metric) that shows a job's objective while it trains, for pruning:
    stage 2's accuracy or loss for a pipeline ranked by stage 2 (or `gain`: stage 2 minus a
    baseline that its sweep does not vary), the training stage's for a plain job; None when
    the objective is only known at the end (a stage-1 or baseline metric: nothing to compare
    epoch by epoch)."""
    explicit = name(objective, dim_reduce)[len(VAL) :]
    if not dim_reduce:
        return StageKind.train, explicit
    if explicit in ("gain", "gain_at_cost"):
        return StageKind.stage2, "acc"
    stage, _, metric = explicit.partition("/")
    return (StageKind.stage2, metric) if stage == StageKind.stage2 else None
