"""A sweep's Pareto front of accuracy and cost (report.front) against a brute-force dominance
check written here from the definition, with its tests from scipy (the exact McNemar test: a
binomial test of the discordant images) and statsmodels (Holm); and the cases that say what the
front is for: a point cheaper and tied is kept, a point dearer and tied is dropped, a dearer
but significantly more accurate point is kept."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy.stats import binomtest
from statsmodels.stats.multitest import multipletests

from sporeflow.config import objective
from sporeflow.report.decision import Point
from sporeflow.report.front import CHEAPER, MORE_ACCURATE, front


def point(label, seeds: dict[int, np.ndarray]) -> Point:
    return Point(label, {s: 10 * i + s for i, s in enumerate(seeds)}, dict(seeds))


def outcomes(rng, accuracy: float, seeds=(1, 2), n=300) -> dict[int, np.ndarray]:
    return {s: rng.random(n) < accuracy for s in seeds}


def brute_force(points: list[Point], costs: dict[str, float]):
    """(front labels, {beaten label: {beater label: (how, Holm p)}}) from the definition."""
    tested = []
    for a, b in itertools.combinations(points, 2):
        common = sorted(set(a.outcomes) & set(b.outcomes))
        if not common:
            continue
        x = np.concatenate([a.outcomes[s] for s in common])
        y = np.concatenate([b.outcomes[s] for s in common])
        only_a, only_b = int((x & ~y).sum()), int((~x & y).sum())
        p = binomtest(only_a, only_a + only_b, 0.5).pvalue if only_a + only_b else 1.0
        tested.append((a.label, b.label, only_a - only_b, p))
    holm = multipletests([t[3] for t in tested], method="holm")[1] if tested else []
    beaten: dict[str, dict[str, tuple[str, float]]] = {p.label: {} for p in points}
    for (a, b, lead, _), q in zip(tested, holm, strict=True):
        for first, second, ahead in ((a, b, lead), (b, a, -lead)):
            shown_better = q < 0.05 and ahead > 0
            shown_worse = q < 0.05 and ahead < 0
            if shown_better and costs[first] <= costs[second]:
                beaten[second][first] = (MORE_ACCURATE, q)
            elif costs[first] < costs[second] and not shown_worse:
                beaten[second][first] = (CHEAPER, q)
    return {label for label, by in beaten.items() if not by}, beaten


def test_cheaper_and_tied_is_kept_dearer_and_tied_dropped_dearer_and_better_kept():
    rng = np.random.default_rng(0)
    base = outcomes(rng, 0.80)
    flipped = {s: o.copy() for s, o in base.items()}
    flipped[1][:3] = ~flipped[1][:3]  # a few images apart: a tie
    better = {s: o | (rng.random(o.size) < 0.6) for s, o in base.items()}  # far more right
    points = [point("cheap", base), point("dear_tied", flipped), point("dear_better", better)]
    costs = {"cheap": 100.0, "dear_tied": 200.0, "dear_better": 200.0}
    found = front(points, costs, "cost/passes")
    assert [p.label for p in found.front] == ["cheap", "dear_better"]
    (beaten,) = found.beaten
    assert beaten.point.label == "dear_tied"
    # dear_tied is beaten by cheap (cheaper, tied) and by dear_better (as dear, more
    # accurate): the one on the front that is most accurate speaks
    assert beaten.by.label == "dear_better" and beaten.how == MORE_ACCURATE
    assert found.line("val/acc").startswith("front: cheap (val/acc 0.")
    assert ", cost/passes 100), dear_better (val/acc " in found.line("val/acc")
    (line,) = found.beaten_lines()
    assert line.startswith("dear_tied: beaten by dear_better (more accurate: p=")
    only_tied = front(points[:2], costs)
    assert [p.label for p in only_tied.front] == ["cheap"]
    (b,) = only_tied.beaten
    assert b.how == CHEAPER and b.p_holm > 0.05
    assert only_tied.beaten_lines() == [
        f"dear_tied: beaten by cheap (cheaper, not worse: p={b.p_holm:.3g})"
    ]


def test_a_cheaper_point_shown_worse_does_not_beat_and_equal_cost_ties_both_stay():
    rng = np.random.default_rng(1)
    good = outcomes(rng, 0.9)
    bad = {s: o & (rng.random(o.size) < 0.6) for s, o in good.items()}
    found = front(
        [point("cheap_bad", bad), point("dear_good", good)], {"cheap_bad": 1, "dear_good": 5}
    )
    assert {p.label for p in found.front} == {"cheap_bad", "dear_good"}
    twin = {s: o.copy() for s, o in good.items()}
    twin[2][:2] = ~twin[2][:2]
    found = front([point("a", good), point("b", twin)], {"a": 3.0, "b": 3.0})
    assert {p.label for p in found.front} == {"a", "b"} and not found.beaten


def test_points_without_a_common_seed_are_not_compared():
    rng = np.random.default_rng(2)
    found = front(
        [point("a", outcomes(rng, 0.5, (1,))), point("b", outcomes(rng, 0.9, (2,)))],
        {"a": 1.0, "b": 2.0},
    )
    assert {p.label for p in found.front} == {"a", "b"}


@pytest.mark.parametrize("seed", range(12))
def test_front_matches_a_brute_force_dominance_check(seed):
    rng = np.random.default_rng(100 + seed)
    k = int(rng.integers(2, 7))
    seeds = (1, 2, 3)
    points, costs = [], {}
    shared = rng.random(200)  # paired: the same images are hard for every point
    for i in range(k):
        acc = rng.uniform(0.55, 0.95)
        found = {}
        for s in seeds:
            noise = rng.random(200)
            found[s] = (0.5 * shared + 0.5 * noise) < acc
        if rng.random() < 0.2:  # a point that missed a seed
            found.pop(3)
        label = f"p{i}"
        points.append(point(label, found))
        costs[label] = float(rng.choice([50, 100, 150, 200]))
    decided = front(points, costs)
    expected_front, beaten = brute_force(points, costs)
    assert {p.label for p in decided.front} == expected_front
    assert {b.point.label for b in decided.beaten} == set(costs) - expected_front
    for b in decided.beaten:
        how, q = beaten[b.point.label][b.by.label]
        assert b.how == how
        assert b.p_holm == pytest.approx(q, rel=1e-9, abs=1e-12)
    records = decided.records()
    assert [r["cost"] for r in records] == sorted(r["cost"] for r in records)
    assert sum(r["front"] for r in records) == len(expected_front)


def test_two_objectives_are_an_accuracy_then_a_cost():
    assert objective.refusal(["val/acc", "cost/passes"], False, []) is None
    assert objective.refusal(["val/stage2/acc", "stage2/passes"], True, []) is None
    assert objective.refusal(["acc", "cost/passes"], False, []) is None  # the old name
    assert objective.primary(["val/acc", "cost/passes"]) == "val/acc"
    assert objective.cost_of(["val/acc", "cost/passes"], False) == "cost/passes"
    assert objective.cost_of("val/acc", False) == "" and objective.primary("val/acc") == "val/acc"
    assert objective.parts("['val/acc', 'cost/passes']") == ["val/acc", "cost/passes"]
    assert not objective.maximize("cost/passes") and objective.maximize("val/acc")
    assert objective.metric_key("cost/passes", False) == "cost/passes"
    assert "cost/passes" in objective.allowed(False, [], costs=True)
    assert "stage2/passes" in objective.allowed(True, [], costs=True)
    assert "cost/passes" not in objective.allowed(False, [])
    assert objective.refusal(["val/acc", "stage2/passes"], False, []) is not None
    for refused in (
        ["cost/passes", "val/acc"],
        ["test/acc", "cost/passes"],
        ["val/acc", "val/loss"],
    ):
        assert objective.refusal(refused, False, []) is not None
    assert objective.direction_refusal(["val/acc", "cost/passes"], ["maximize"]) is not None
    assert objective.direction_refusal(["val/acc", "cost/passes"], ["maximize", "minimize"]) is None


def test_a_pipelines_cost_passes_is_its_stage2_passes():
    """In a pipeline `cost/passes` (the issue's command) is an alias: it resolves to the
    parent's `stage2/passes` (stage 2's own cost/passes, overhead included) wherever it is
    read, so a sweep records and ranks one name with one meaning."""
    listed = ["val/stage2/acc", "cost/passes"]
    assert objective.refusal(listed, True, []) is None
    assert objective.refusal(["val/gain_at_cost", "cost/passes"], True, ["budget"]) is None
    assert objective.cost_of(listed, True) == "stage2/passes"
    assert objective.cost_of(["val/stage2/acc", "stage2/passes"], True) == "stage2/passes"
    assert objective.name("cost/passes", True) == "stage2/passes"
    assert objective.metric_key("cost/passes", True) == "stage2/passes"
    assert objective.name("cost/passes", False) == "cost/passes"  # a plain job's own
    assert "cost/passes" in objective.allowed(True, [], costs=True)
    explicit = [objective.name(o, True) for o in listed]
    assert explicit == ["val/stage2/acc", "stage2/passes"]
    assert objective.direction_refusal(explicit, ["maximize", "minimize"]) is None
    assert objective.direction_refusal(explicit, ["maximize", "maximize"]) is not None
    # the cost is still never first, and a plain job's list does not take the pipeline's name
    assert "never the first" in objective.refusal(["cost/passes", "val/stage2/acc"], True, [])
    refused = objective.refusal(["val/acc", "stage2/passes"], False, [])
    assert refused == (
        "sweep.objective=[val/acc,stage2/passes]: stage2/passes is not a plain job's cost; "
        "allowed: cost/passes"
    )
    assert "cost/passes (an alias of stage2/passes)" in objective.refusal(
        ["val/stage2/acc", "val/stage2/loss"], True, []
    )


def test_a_two_objective_sweep_ends_with_its_front(tmp_path, monkeypatch, capsys):
    """Three points of TINY jobs trained 1, 2 and 3 epochs (their cost/passes differ) with
    `sweep.objective=[val/acc,cost/passes]`: the sweep's last line names the front, a line per
    other point names what beats it; the parent holds the tag, front.csv, the metrics and
    front.png; the front is the brute-force check's on the jobs' own artifacts."""
    import csv
    import tempfile

    from helpers.store import client_of, runs_of
    from helpers.sweeps import run_sweep

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    two = "sweep.objective=[val/acc,cost/passes]"
    jobs = [[f"epochs={e}", two] for e in (1, 2, 3)]
    callback = run_sweep(tmp_path, jobs, ["epochs=1,2,3", two])
    err = capsys.readouterr().err.rstrip("\n").splitlines()
    runs = runs_of(tmp_path)
    parent = next(r for r in runs if r.info.run_id == callback.run_id)
    assert parent.data.tags["sweep.cost"] == "cost/passes"
    assert parent.data.tags["sweep.objective"] == "val/acc"
    children = [r for r in runs if r.data.tags.get("sweep.run_id") == callback.run_id]
    points, costs = [], {}
    for run in children:
        label = f"epochs={run.data.params['epochs']}"
        with tempfile.TemporaryDirectory() as tmp:
            path = client_of(tmp_path).download_artifacts(run.info.run_id, "predictions.npy", tmp)
            points.append(point(label, {1: np.load(path)}))
        costs[label] = run.data.metrics["cost/passes"]
    assert len(set(costs.values())) == 3, costs
    expected_front, beaten = brute_force(points, costs)
    on_front = sorted(expected_front, key=costs.get)
    last = err[-2]  # the front, then which of its points leads (report.decision.lead)
    assert last.startswith("front: "), err[-6:]
    assert err[-1].startswith("front's leader: "), err[-6:]
    leader = parent.data.tags["sporeflow.leader"]
    assert err[-1].removeprefix("front's leader: ").split(" (")[0] == leader
    assert leader == "none" or leader in on_front
    assert [s.split(" (")[0] for s in last.removeprefix("front: ").split("), ")] == on_front
    assert parent.data.tags["sporeflow.front"] == "; ".join(on_front)
    off = [ln for ln in err if ": beaten by " in ln]
    assert sorted(ln.split(":")[0] for ln in off) == sorted(set(costs) - expected_front)
    for line in off:
        label, rest = line.split(": beaten by ")
        assert rest.split(" (")[0] in beaten[label]
    with open(tmp_path / "multirun" / "front.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["point"] for r in rows] == sorted(costs, key=costs.get)
    assert [r["front"] == "yes" for r in rows] == [r["point"] in expected_front for r in rows]
    metrics = parent.data.metrics
    assert metrics["front/size"] == len(expected_front)
    for row, r in enumerate(rows):
        assert metrics[f"front/{row}/cost"] == pytest.approx(costs[r["point"]])
        assert metrics[f"front/{row}/on_front"] == (1.0 if r["front"] == "yes" else 0.0)
    assert (tmp_path / "multirun" / "front.png").stat().st_size > 0
    artifacts = {a.path for a in client_of(tmp_path).list_artifacts(parent.info.run_id)}
    assert {"front.csv", "front.png"} <= artifacts

    # the front shown: `sporeflow compare --sweep` and sporeflow.results(...).front, from the store
    import sporeflow
    from helpers.inprocess import sporeflow_here

    compared = sporeflow_here(tmp_path, "compare", "--sweep", callback.run_id)
    assert compared.returncode == 0, compared.stderr[-2000:]
    shown = compared.stdout.rstrip("\n").splitlines()
    assert shown[-2:] == [last, err[-1]], "the front and its leader, as the sweep ended"
    assert [ln for ln in shown if ": beaten by " in ln] == off
    assert any(ln.split()[:2] == ["point", "seeds"] for ln in shown), "the front's table"
    monkeypatch.chdir(tmp_path)
    found = sporeflow.results(callback.run_id, uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    table = found.front
    assert list(table.columns[:9]) == [
        "point", "acc", "ci_low", "ci_high", "cost", "on_front", "beaten_by", "how", "p_holm",
    ]  # fmt: skip
    assert list(table["point"]) == [r["point"] for r in rows]
    assert list(table["on_front"]) == [r["front"] == "yes" for r in rows]
    assert list(table["cost"]) == pytest.approx([costs[p] for p in table["point"]])
    for row, r in enumerate(table.itertuples()):
        assert r.acc == pytest.approx(metrics[f"front/{row}/acc"])
        assert r.ci_low <= r.acc <= r.ci_high
        assert (r.beaten_by == "") == r.on_front
        assert np.isnan(r.p_holm) == r.on_front
        if not r.on_front:
            assert r.beaten_by in beaten[r.point]
    one = sporeflow.results(uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert one.run_id == callback.run_id

    # `sporeflow ui`: a link that opens front.png in MLflow's artifact view, and the front's line
    ui = sporeflow_here(tmp_path, "ui", "--links-only", "--sweep", callback.run_id)
    assert ui.returncode == 0, ui.stderr[-2000:]
    links = dict(line.split(None, 1) for line in ui.stdout.splitlines() if line.strip())
    assert links["front"].endswith(f"/runs/{callback.run_id}/artifacts/front.png"), links
    assert ui.stderr.rstrip("\n").splitlines()[-1] == last, "the front line the sweep ended with"


def test_ui_links_open_the_front_of_a_sweep_that_has_one():
    """`front` is MLflow's own route to a run's artifact (getRunPageRoute with a path):
    `#/experiments/<id>/runs/<run>/artifacts/front.png`, on the sweep's parent; a sweep of one
    objective (no `sporeflow.front` tag) has no such link, and the other links are unchanged."""
    from types import SimpleNamespace

    from sporeflow.report.sweep_report import ui_links

    def parent(tags: dict) -> SimpleNamespace:
        base = {"sweep.objective": "val/stage2/acc", "sweep.view": "sweep-p1"}
        return SimpleNamespace(
            info=SimpleNamespace(run_id="p1"), data=SimpleNamespace(tags={**base, **tags})
        )

    job = SimpleNamespace(info=SimpleNamespace(run_id="j1"), data=SimpleNamespace(tags={}))
    base = "http://127.0.0.1:5000"
    plain = dict(ui_links(base, "7", parent({}), [job]))
    assert "front" not in plain
    two = {"sweep.cost": "stage2/passes", "sporeflow.front": "boost.rho=0.4"}
    found = ui_links(base, "7", parent(two), [job])
    assert dict(found)["front"] == f"{base}/#/experiments/7/runs/p1/artifacts/front.png"
    assert [(k, v) for k, v in found if k != "front"] == list(plain.items())
    assert ui_links(base, "7", None, []) == [("experiment", plain["experiment"])]
    # the parent's artifacts as the store lists them: the figure's drawing failed -> the table;
    # neither there -> no link
    table = dict(ui_links(base, "7", parent(two), [job], {"front.csv", "comparison.txt"}))
    assert table["front"] == f"{base}/#/experiments/7/runs/p1/artifacts/front.csv"
    assert "front" not in dict(ui_links(base, "7", parent(two), [job], {"comparison.txt"}))
    shown = dict(ui_links(base, "7", parent(two), [job], {"front.png", "front.csv"}))
    assert shown["front"].endswith("/artifacts/front.png")
