"""Issue 77 item 2: the values the schema let through and MindSpore refused - a rate of inf
(a MindSpore traceback, exit 1, a run dir left), a negative seed (the same), an image size the
network's layers do not take (a Conv2d traceback after training had started, the run FAILED),
an override Hydra's grammar cannot read (`LexerNoViableAltException`), an interpolation to a
missing key or variable (no key named, an empty run dir left). Each is now exit 2, one line
naming the key and what is allowed, before any work: no run dir, no MLflow store."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_refusals import refused

from helpers.inprocess import TINY
from sporeflow.core.ranges import ANY_NUMBER, Positive, Range

CONV = (
    "For 'Conv2d', input shape's h and w after padding must be greater than or equal to "
    "kernel_size's h and w respectively"
)
LENET = "the model sporeflow.models.lenet.LeNet5"
SEEDS = "must be in [0, 4294967295]"

CASES = {
    "a rate of inf (MindSpore refused it in the optimizer's constructor)": (
        ["optimizer.lr=inf"],
        "optimizer.lr=inf: must be a finite number > 0",
    ),
    "a rate of nan": (["optimizer.lr=nan"], "optimizer.lr=nan: must be a finite number > 0"),
    "a momentum of -inf": (
        ["optimizer.momentum=-inf"],
        "optimizer.momentum=-inf: must be a finite number in [0, 1)",
    ),
    "a framework float of inf": (
        ["train.clip_grad_norm=inf"],
        "train.clip_grad_norm=inf: must be a finite number >= 0",
    ),
    "a pipeline float of inf, named though the pipeline is off": (
        ["boost.alpha=inf"],
        "boost.alpha=inf: must be a finite number > 0",
    ),
    "a schedule's float of inf": (
        ["optimizer.schedule.name=cosine", "+optimizer.schedule.lr_end=inf"],
        "optimizer.schedule.lr_end=inf: must be a finite number >= 0",
    ),
    "a component's float without a range of its own": (
        [*TINY, "+dataset.mean=inf"],
        "dataset.mean=inf: must be a finite number",
    ),
    "a negative seed (MindSpore's set_seed refused it)": (["seed=-5"], f"seed=-5: {SEEDS}"),
    "a seed above numpy's and MindSpore's data sets' 2**32 - 1": (
        ["seed=4294967296"],
        f"seed=4294967296: {SEEDS}",
    ),
    "a negative seed of the synthetic images": (
        [*TINY, "+dataset.data_seed=-1"],
        "dataset.data_seed=-1: must be >= 0",
    ),
    "an image size below LeNet-5's kernels": (
        ["dataset.image_size=3"],
        f"dataset.image_size=3: {LENET} does not take 1x3x3 images ({CONV}); "
        "allowed: 32..35 (of the sizes 1..64 tried)",
    ),
    "an image size above the one LeNet-5's dense layer is made for": (
        ["dataset.image_size=64"],
        f"dataset.image_size=64: {LENET} does not take 1x64x64 images (For 'MatMul' the input "
        "dimensions must be equal, but got 'x1_col': 2704 and 'x2_row': 400); allowed: 32..35 "
        "(of the sizes 1..128 tried)",
    ),
    "an MLP made for other images than the data set's": (
        [*TINY, "model.image_size=12"],
        "dataset.image_size=8: the model sporeflow.models.mlp.MLP does not take 1x8x8 images "
        "(For 'MatMul' the input dimensions must be equal, but got 'x1_col': 64 and 'x2_row': "
        "144); allowed: 12 (of the sizes 1..64 tried)",
    ),
    "a value Hydra's grammar does not take unquoted": (
        ["seed=~"],
        "seed=~: Hydra's override grammar does not take '~' in a value left unquoted (null is "
        "written null); quote the value, seed='~' (in a shell: \"seed='~'\"), or keep to "
        "letters, digits and _-+./$%*@?|\\:",
    ),
    "a quote never closed": (
        ["seed='1"],
        "seed='1: the quote ' is never closed; write seed='<value>'",
    ),
    "a bracket never closed": (
        ["seed=[1,2"],
        "seed=[1,2: Hydra's override grammar cannot read this value at '[1,2': close every "
        "bracket ([a,b], {k: v}), keep '=', '(' and ')' for sweeps and functions, or quote the "
        "value: seed='[1,2'",
    ),
    "an override without a value": (
        ["seed"],
        "seed: an override is key=value (+key=value adds a key, ~key deletes one)",
    ),
    "a character no key has": (
        ["tracking.run;name=a"],
        "tracking.run;name=a: ';' cannot be part of a key; a key is names joined by dots "
        "(dataset.image_size), written key=value",
    ),
    "an interpolation to a key the config lacks": (
        ["tracking.run_name=${model.nme}"],
        "tracking.run_name=${model.nme}: the config has no key model.nme",
    ),
    "an interpolation to a misspelt key": (
        ["tracking.run_name=${model.num_clases}"],
        "tracking.run_name=${model.num_clases}: the config has no key model.num_clases; did you "
        "mean model.num_classes?",
    ),
    "an interpolation to an unset environment variable": (
        ["tracking.run_name=${oc.env:SPOREFLOW_UNSET_77}"],
        "tracking.run_name=${oc.env:SPOREFLOW_UNSET_77}: the environment variable "
        "SPOREFLOW_UNSET_77 is not set; set it, or give a default: "
        "${oc.env:SPOREFLOW_UNSET_77,<default>}",
    ),
    "an interpolation to an unset variable in a component's setting": (
        ["model.num_classes=${oc.env:SPOREFLOW_UNSET_77}"],
        "model.num_classes=${oc.env:SPOREFLOW_UNSET_77}: the environment variable "
        "SPOREFLOW_UNSET_77 is not set; set it, or give a default: "
        "${oc.env:SPOREFLOW_UNSET_77,<default>}",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_value_mindspore_refuses_is_refused_before_any_work(tmp_path, monkeypatch, case):
    monkeypatch.delenv("SPOREFLOW_UNSET_77", raising=False)
    args, line = CASES[case]
    assert refused(args, tmp_path) == [line]
    assert list(tmp_path.iterdir()) == [], "MindSpore's analyze_fail.ir, or another file, was left"


# the commands whose refusals docs/troubleshooting.md quotes: the line each prints is on the page
QUOTED = [
    ["optimizer.lr=inf"],
    [*TINY, "+dataset.mean=inf"],
    ["seed=-5"],
    ["dataset.image_size=3"],
    ["seed=~"],
    ["seed='1"],
    ["seed"],
    ["tracking.run_name=${model.nme}"],
    ["tracking.run_name=${model.num_clases}"],
    ["tracking.run_name=${oc.env:UNSET}"],
]


@pytest.mark.parametrize("args", QUOTED, ids=lambda a: a[-1])
def test_the_troubleshooting_page_quotes_the_line_each_prints(tmp_path, monkeypatch, args):
    from helpers.pages import documented

    monkeypatch.delenv("UNSET", raising=False)
    (line,) = refused(args, tmp_path)
    assert documented(f"Config error: {line}", "troubleshooting.md"), line


def test_an_interpolation_hydra_resolves_for_its_own_keys_is_named_by_its_override(
    tmp_path, monkeypatch
):
    """`resume=` is read by hydra.run.dir's resolver: its failure names the override, and the
    outputs/ folder Hydra would have made is not there."""
    from helpers.inprocess import train_cli

    monkeypatch.delenv("SPOREFLOW_UNSET_77", raising=False)
    code, err = train_cli(["resume=${oc.env:SPOREFLOW_UNSET_77}"], tmp_path, run_dir=None)
    assert code == 2, err[-3000:]
    assert err.startswith(
        "Config error: resume=${oc.env:SPOREFLOW_UNSET_77}: the environment variable "
        "SPOREFLOW_UNSET_77 is not set"
    ), err
    assert list(tmp_path.iterdir()) == []


def test_an_override_that_holds_an_interpolation_is_recorded_as_typed(tmp_path, monkeypatch):
    """The run's `overrides` tag repeats the command as typed: the interpolation was resolved
    (`tracking.run_name=r-16`) when sporeflow read Hydra's list of overrides."""
    from mlflow.tracking import MlflowClient

    from helpers.inprocess import train_cli

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    typed = "tracking.run_name=r-${model.hidden}"
    code, err = train_cli([*TINY, "epochs=1", "tracking.log_model=false", typed], tmp_path)
    assert code == 0, err[-3000:]
    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("sporeflow").experiment_id])
    assert run.info.run_name == "r-16"
    assert run.data.tags["overrides"].endswith(typed), run.data.tags["overrides"]


def test_every_range_is_of_finite_numbers_unless_it_says_otherwise():
    assert Positive.problem(math.inf) == "must be a finite number > 0"
    assert ANY_NUMBER.problem(-math.inf) == "must be a finite number"
    assert ANY_NUMBER.problem(math.nan) == "must be a finite number"
    assert ANY_NUMBER.problem(1e308) is None
    unbounded = Range(low=0, finite=False)
    assert unbounded.problem(math.inf) is None
    assert unbounded.problem(math.nan) == "must be a finite number >= 0"


def test_the_largest_seed_shuffles_every_epoch():
    """Epoch e shuffles by RandomState(seed + e): at seed 2**32 - 1 the second epoch's seed
    wraps instead of raising in the middle of training."""
    from sporeflow.data.sampling import EpochSampler

    sampler = EpochSampler(10, seed=2**32 - 1)
    first, second = sampler.epoch_indices(0), sampler.epoch_indices(1)
    assert sorted(second) == list(range(10))
    assert np.array_equal(second, np.random.RandomState(0).permutation(10))
    assert not np.array_equal(first, second)
