"""What a stage spent (engine.cost), the budget arm's allowance (job.budget) and the arms'
curves against cost (report.cost_report), worked by hand: passes, the snapshots' and PCA's
passes by the rule (against numpy's own count of the same formula), the seconds unit from both
arms' measured seconds per step, and the first pass that reaches a target."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sporeflow.engine.cost import FORWARD_SHARE, Cost, Overhead
from sporeflow.job.budget import BudgetError, budget_of

# stage 1: 16 epochs x 100 plain steps in 40 s, snapshots 2 s; stage 2: 2 epochs x 100 steps,
# 130 of them accepted r = 1 (one trial forward), 70 took two, in 12 s
STAGE1 = Cost(
    step_seconds=40.0,
    snapshot_seconds=2.0,
    steps=1600,
    forward_passes=1600,
    backward_passes=1600,
    optimizer_steps=1600,
    images=1600 * 64,
)
STAGE2 = Cost(
    step_seconds=12.0,
    steps=200,
    forward_passes=200 + 130 + 2 * 70,
    backward_passes=200,
    optimizer_steps=200,
    images=200 * 64,
)


# 40 snapshots of 61,684 weights (LeNet-5), k = 32, 416,520 forward MACs per image, batch 32
OVERHEAD = Overhead(40, 32, 61_684, 416_520, 32)


def rule_in_numpy(n, k, p, f, b, pca=True):
    """The documented rule (engine.cost), counted on arrays of the PCA's operation shapes."""
    per_pass = 3 * b * f  # forward + backward (two forwards) over the batch
    snapshots = n * p  # each snapshot copies the P weights
    ops = [
        2 * np.prod([n, p]),  # differences to the reference, in both passes over the files
        np.prod([n, p, n]),  # Gram: (N x P) @ (P x N)
        2 * np.prod([n, n, n]),  # centring: J G J
        9 * n**3 / 2,  # symmetric QR with its vectors: 9 N^3 flops (Golub & Van Loan 8.3)
        np.prod([k, n, p]),  # projection: (k x N) @ (N x P)
    ]
    return snapshots / per_pass, (float(np.sum(ops)) if pca else 0.0) / per_pass


def test_a_stage2_step_costs_one_pass_and_a_third_per_trial_forward():
    assert FORWARD_SHARE == pytest.approx(1 / 3)
    assert STAGE2.passes == pytest.approx(200 + (130 + 140) / 3)
    assert STAGE1.passes == 1600 and STAGE1.seconds_per_pass == pytest.approx(40 / 1600)
    waited = Cost(steps=4, forward_passes=8, backward_passes=4, overhead_passes=2.5)
    assert waited.step_passes == pytest.approx(4 + 4 / 3)
    assert waited.passes == pytest.approx(4 + 4 / 3 + 2.5)  # cost/passes holds the overhead
    assert Cost.from_metrics(waited.metrics()) == waited


@pytest.mark.parametrize(
    "n, k, p, f, b, pca",
    [
        (40, 32, 61_684, 416_520, 32, True),  # LeNet-5 on digits, boost=dim_reduce
        (12, 8, 1_482, 1_440, 32, True),  # the tests' MLP, debug=dim_reduce
        (40, 32, 11_172_042, 37_000_000, 64, True),  # ResNet-18-sized
        (40, 32, 61_684, 416_520, 32, False),  # a given basis: no PCA
    ],
)
def test_the_overhead_is_the_documented_rule(n, k, p, f, b, pca):
    overhead = Overhead(n, k, p, f, b, pca)
    snapshots, pca_passes = rule_in_numpy(n, k, p, f, b, pca)
    assert overhead.snapshot_passes == pytest.approx(snapshots, rel=1e-12)
    assert overhead.pca_passes == pytest.approx(pca_passes, rel=1e-12)
    assert overhead.passes == pytest.approx(snapshots + pca_passes, rel=1e-12)
    tags = overhead.tags()
    assert (tags["overhead.snapshots"], tags["overhead.params"]) == (str(n), str(p))
    assert tags["overhead.forward_macs"] == str(f) and tags["overhead.pca"] == str(pca).lower()


def test_a_budget_in_passes_is_a_pure_function_of_stage2s_passes_and_the_rule():
    budget = budget_of("passes", STAGE1, STAGE2, OVERHEAD, plain_epochs=2, pca_seconds=3.0)
    snapshots, pca = rule_in_numpy(40, 32, 61_684, 416_520, 32)
    assert budget.overhead_passes == pytest.approx(snapshots + pca)
    assert budget.passes == pytest.approx(STAGE2.passes + snapshots + pca)
    assert budget.steps == round(STAGE2.passes + snapshots + pca)  # a plain step is one pass
    assert abs(budget.steps - budget.passes) <= 0.5
    assert budget.steps_per_epoch == 100 and budget.epochs == math.ceil(budget.steps / 100)
    assert budget.ratio == pytest.approx(budget.steps / 200)
    assert (
        budget.describe()
        == f"{budget.steps / 200:.2f}x the passes of 2 plain epochs: {budget.steps} steps"
    )
    assert budget.tags()["budget.steps"] == str(budget.steps)
    assert budget.tags()["budget.overhead.forward_macs"] == "416520"
    # measured seconds are figures only: any load, any machine, the same steps
    for slow in (0.1, 10.0, 1000.0):
        stage1 = Cost(
            step_seconds=40.0 * slow,
            snapshot_seconds=2.0 * slow,
            steps=1600,
            forward_passes=1600,
            backward_passes=1600,
        )
        stage2 = Cost(
            step_seconds=12.0 * slow,
            steps=200,
            forward_passes=STAGE2.forward_passes,
            backward_passes=200,
        )
        again = budget_of("passes", stage1, stage2, OVERHEAD, 2, pca_seconds=3.0 * slow)
        assert again.steps == budget.steps and again.passes == budget.passes
    # stage 2's run's cost/passes (its meter holds the overhead) is the budget
    recorded = Cost.from_metrics({**STAGE2.metrics(), "cost/overhead_passes": OVERHEAD.passes})
    assert recorded.passes == pytest.approx(budget.passes)
    assert budget_of("passes", STAGE1, recorded, OVERHEAD, 2).steps == budget.steps


def test_a_budget_in_seconds_takes_its_steps_from_stage1s_seconds_per_step():
    budget = budget_of("seconds", STAGE1, STAGE2, OVERHEAD, plain_epochs=2, pca_seconds=3.0)
    seconds = 12.0 + 2.0 + 3.0
    assert budget.seconds == pytest.approx(seconds)
    assert budget.steps == round(seconds / (40 / 1600))
    tags = budget.tags()
    assert float(tags["budget.stage1_seconds_per_step"]) == pytest.approx(40 / 1600)
    assert float(tags["budget.stage2_seconds_per_step"]) == pytest.approx(12 / 200)
    assert tags["budget.unit"] == "seconds"


def test_no_stage2_step_is_no_budget_and_an_unmeasured_stage1_no_seconds_budget():
    with pytest.raises(BudgetError, match="stage 2 took no step"):
        budget_of("passes", STAGE1, Cost(), OVERHEAD, 2)
    with pytest.raises(BudgetError, match="seconds per step are unknown"):
        budget_of("seconds", Cost(), STAGE2, OVERHEAD, 2)
    # a stage 1 of an older run (no seconds recorded): the rule needs none
    assert budget_of("passes", Cost(), STAGE2, OVERHEAD, 2).overhead_passes == OVERHEAD.passes


def test_forward_macs_count_dense_and_conv_layers_from_their_shapes():
    from sporeflow.engine.macs import forward_macs, weight_count
    from sporeflow.models.lenet import LeNet5
    from sporeflow.models.mlp import MLP

    lenet = LeNet5(10, 1)
    # conv1 28x28 x 6x1x5x5, conv2 10x10 x 16x6x5x5, dense 400x120, 120x84, 84x10
    expected = 28 * 28 * 150 + 10 * 10 * 2400 + 400 * 120 + 120 * 84 + 84 * 10
    assert forward_macs(lenet, (1, 32, 32)) == expected
    assert weight_count(lenet) == sum(int(np.prod(p.shape)) for p in lenet.trainable_params())
    assert forward_macs(MLP(10, 8, 1, 16), (1, 8, 8)) == 64 * 16 + 16 * 16 + 16 * 10


def test_a_cost_survives_its_runs_metrics():
    assert Cost.from_metrics(STAGE2.metrics()) == STAGE2
    assert STAGE2.metrics()["cost/passes"] == pytest.approx(STAGE2.passes)
    assert Cost.from_metrics({}) == Cost()


def test_an_arms_curve_starts_at_stage1s_end_and_its_target_is_the_first_pass_reaching_it():
    from sporeflow.report.cost_report import arm_curve, passes_to_target

    history = [
        (1, {"acc": 0.80, "passes": 45.0}),
        (2, {"acc": 0.91, "passes": 90.0}),
        (3, {"acc": 0.90}),
    ]
    curve = arm_curve(history, offset=12.5, start_acc=0.85)
    assert curve == [
        (0.0, 0.85),
        (57.5, 0.80),
        (102.5, 0.91),
    ]  # an eval without its cost is left out
    assert passes_to_target(curve, 0.85) == 0.0  # stage 1 already had it
    assert passes_to_target(curve, 0.9) == 102.5
    assert math.isinf(passes_to_target(curve, 0.95))  # never reached: infinite (AlgoPerf)
