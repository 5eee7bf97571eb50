"""`sporeflow compare RUN_A RUN_B` and `sporeflow.compare(a, b)` (issue 78 item 3): two real
trained runs (in this process, a real sqlite store) paired on their test images, found by run
dir, run id and `models:/` URI as eval.py finds a source. The numbers are checked against
statsmodels (McNemar's exact test, Wilson's interval) and the independent Newcombe reference of
tests/helpers/intervals.py (with the published worked example); runs tested on other images are
refused in one line (exit 2); the Python API gives the numbers the command prints."""

from __future__ import annotations

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from statsmodels.stats.contingency_tables import mcnemar
from statsmodels.stats.proportion import proportion_confint

import sporeflow
from helpers.inprocess import run_train_here, sporeflow_here
from helpers.intervals import newcombe_method10, paired_arrays
from sporeflow.core.errors import ConfigError
from sporeflow.report.run_pair import Side, paired

# real digits (learnt in one epoch, so two settings differ image by image), a small network
RUN = ["debug=quick", "dataset=digits", "dataset.image_size=8", "model=mlp", "model.hidden=16"]
TESTED = "synthetic-test 0123456789ab"


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """Three finished runs in one launch dir: `a` and `b` (another optimizer.lr and seed) on the
    same 360 test images, `c` on 450 others; `b` registered as models:/cmp-b/1."""
    where = tmp_path_factory.mktemp("compare")
    for run_dir, args in (
        ("a", ["seed=3"]),
        ("b", ["seed=5", "optimizer.lr=0.3"]),
        ("c", ["seed=3", "dataset.test_fraction=0.25"]),
    ):
        proc = run_train_here([*RUN, *args], where, run_dir=run_dir)
        assert proc.returncode == 0, proc.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{where}/mlflow.db")
    b = run_id(where, "b")
    client.create_registered_model("cmp-b")
    client.create_model_version("cmp-b", source=f"runs:/{b}/model", run_id=b)
    return where


def run_id(launch, run_dir: str) -> str:
    client = MlflowClient(f"sqlite:///{launch}/mlflow.db")
    exp = client.get_experiment_by_name("sporeflow")
    (run,) = client.search_runs([exp.experiment_id], f"tags.run_dir = '{launch / run_dir}'")
    return run.info.run_id


def outcomes(launch, run_dir: str) -> np.ndarray:
    return np.load(launch / run_dir / "test_predictions.npy")


def test_two_runs_by_dir_id_and_model_uri_paired_as_statsmodels_and_newcombe(launch, monkeypatch):
    a, b = outcomes(launch, "a"), outcomes(launch, "b")
    table = [[int((a & b).sum()), int((a & ~b).sum())], [int((~a & b).sum()), int((~a & ~b).sum())]]
    assert table[0][1] + table[1][0] > 0, f"the two runs must differ on some image: {table}"
    expected_p = mcnemar(table, exact=True).pvalue
    low, high = newcombe_method10(table[0][0], table[0][1], table[1][0], table[1][1])
    b_id = run_id(launch, "b")
    found = []
    monkeypatch.chdir(launch)  # where the command runs: the run dir `a` relative to it
    for ref_a, ref_b in (("a", b_id), (run_id(launch, "a"), "models:/cmp-b/1")):
        proc = sporeflow_here(launch, "compare", ref_a, ref_b)
        assert proc.returncode == 0, proc.stderr[-3000:]
        pair = sporeflow.compare(ref_a, ref_b, uri=f"sqlite:///{launch}/mlflow.db")
        # the command prints the API's numbers: the same lines
        assert proc.stdout.strip().splitlines() == pair.lines()
        found.append(pair)
    for pair in found:
        assert pair.run_a == run_id(launch, "a") and pair.run_b == b_id
        assert pair.images == 360 and pair.test_data.startswith("sklearn-digits-test ")
        assert pair.p_value == pytest.approx(expected_p, abs=1e-12)
        assert pair.diff_ci == pytest.approx((low, high), abs=1e-9)
        assert pair.diff == pytest.approx(a.mean() - b.mean())
        assert (pair.only_a, pair.only_b) == (table[0][1], table[1][0])
        assert pair.acc_a == pytest.approx(a.mean()) and pair.acc_b == pytest.approx(b.mean())
        assert pair.ci_a == pytest.approx(
            proportion_confint(int(a.sum()), a.size, method="wilson"), abs=1e-9
        )
        # the config keys that differ, sorted, and nothing else
        assert list(pair.config_diff) == ["optimizer.lr", "seed"]
        assert pair.config_diff["seed"] == ("3", "5")
        assert pair.config_diff["optimizer.lr"][1] == "0.3"
        spent_a, spent_b = pair.cost["cost/passes"]  # one epoch of the same batches each
        assert spent_a == spent_b > 0 and set(pair.cost) >= {"cost/step_seconds", "cost/images"}
        better = "better" if a.mean() > b.mean() else "worse"
        assert pair.verdict == ("cannot tell" if expected_p >= 0.05 else better)
    text = "\n".join(found[0].lines())
    assert f"McNemar p={expected_p:.3g}" in text
    assert "  optimizer.lr: " in text and "  seed: 3 -> 5" in text
    assert text.index("cost:") < text.index("config keys that differ")


def test_runs_tested_on_other_images_are_refused_in_one_line(launch):
    proc = sporeflow_here(launch, "compare", "a", "c")
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert "RUN_A=a and RUN_B=c were not tested on the same images" in line, line
    assert "(360 test images)" in line and "(450 test images)" in line
    with pytest.raises(ConfigError, match="not tested on the same images"):
        sporeflow.compare(launch / "a", launch / "c", uri=f"sqlite:///{launch}/mlflow.db")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["a", "nowhere"], "RUN_B=nowhere: not a run dir"),
        (["a", "a/checkpoints/final.ckpt"], "a checkpoint holds weights"),
        (["a"], "give two runs"),
        (["a", "b", "--sweep", "latest"], "give two runs"),
    ],
)
def test_a_run_that_is_not_a_finished_run_or_a_wrong_mode_is_one_line(launch, args, says):
    proc = sporeflow_here(launch, "compare", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    (line,) = proc.stderr.strip().splitlines()
    assert says in line, line


def test_the_other_modes_work_as_before(launch):
    proc = sporeflow_here(launch, "compare")
    assert proc.returncode == 0 and "(no boost=dim_reduce pipelines yet)" in proc.stderr
    proc = sporeflow_here(launch, "compare", "--sweep", "latest")
    assert proc.returncode == 2 and "--sweep latest: no sweep run" in proc.stderr


def side(name: str, correct: np.ndarray, **config: str) -> Side:
    return Side(name, None, correct, TESTED, config, {"cost/passes": 4.0})


def test_the_published_worked_example_and_a_clear_difference():
    """Newcombe's worked example (Fagerland et al. 2017, chapter 8: table [[59, 6], [16, 80]]:
    -0.0621, -0.1186 to -0.0046); McNemar's exact p as statsmodels gives it; then 30 images
    only A gets right against 2: A better, and the reverse worse."""
    first, second = paired_arrays(59, 6, 16, 80)
    pair = paired(side("x", first, lr="0.1"), side("y", second, lr="0.2", extra="1"))
    assert round(pair.diff, 4) == -0.0621
    assert tuple(round(v, 4) for v in pair.diff_ci) == (-0.1186, -0.0046)
    assert pair.p_value == pytest.approx(mcnemar([[59, 6], [16, 80]], exact=True).pvalue)
    assert pair.verdict == "cannot tell"  # p = 0.052: the interval leaves 0 out, McNemar does not
    assert pair.config_diff == {"extra": ("(absent)", "1"), "lr": ("0.1", "0.2")}
    first, second = paired_arrays(50, 30, 2, 18)
    assert paired(side("x", first), side("y", second)).verdict == "better"
    assert paired(side("y", second), side("x", first)).verdict == "worse"
    with pytest.raises(ConfigError, match="not tested on the same images"):
        paired(side("x", first), side("y", second[:-1]))
