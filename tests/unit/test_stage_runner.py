"""The stage runner, the specs and reuse, in this process: tiny real jobs (MindSpore on the
CPU, Hydra's compose, a real sqlite MLflow store written by the real journal writer)."""

from __future__ import annotations

import shutil
from pathlib import Path

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor
from omegaconf.errors import ReadonlyConfigError

from helpers.inprocess import TINY, TINY_PIPELINE, run_job
from helpers.store import by_stage, runs_of
from sporeflow.engine.cost import Overhead
from sporeflow.entry.python_api import compose
from sporeflow.job import reuse


def compose_job(overrides):
    return compose(overrides, validate=False)


@pytest.fixture(scope="module")
def launch(tmp_path_factory):
    """One launch dir for the module's jobs (they share its store, like a user's runs do)."""
    import os

    old = os.environ.pop("MLFLOW_TRACKING_URI", None)
    yield tmp_path_factory.mktemp("inprocess")
    if old is not None:
        os.environ["MLFLOW_TRACKING_URI"] = old


# which reuse turns of each of two_pipelines' jobs waited for the store (reuse.published)
WAITED: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def two_pipelines(launch):
    """Two dim-reduce jobs that differ only in stage-2 settings: the second reuses stage 1 and
    every baseline of the first. Each job's reuse turns that waited for the store are kept in
    WAITED."""
    real = reuse.published

    def published(tracker, what, lock):
        WAITED[job].append(what)
        return real(tracker, what, lock)

    jobs = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reuse, "published", published)
        for job, rho in (("a", 0.4), ("b", 0.7)):
            WAITED[job] = []
            jobs.append(run_job(compose_job, launch, [*TINY_PIPELINE, f"boost.rho={rho}"], run=job))
    return tuple(jobs)


def children_of(launch, parent_id):
    return [r for r in runs_of(launch) if r.data.tags.get("mlflow.parentRunId") == parent_id]


def pipeline_runs(launch):
    return sorted(by_stage(runs_of(launch))["pipeline"], key=lambda r: r.info.start_time)


def test_a_pipeline_runs_every_stage_as_a_child_with_its_own_epochs_and_rate(launch, two_pipelines):
    (value, cfg), _ = two_pipelines
    first = pipeline_runs(launch)[0]
    stages = {r.data.tags["stage"]: r for r in children_of(launch, first.info.run_id)}
    assert set(stages) == {"stage1", "stage2", "baseline", "annealed", "snapshot_mean", "budget"}
    assert all(r.info.status == "FINISHED" for r in stages.values())
    assert value == pytest.approx(first.data.metrics["val/stage2/acc"])
    assert value == pytest.approx(stages["stage2"].data.metrics["final/val/acc"])
    # each run records what it trained with, though the config itself was never rewritten
    assert stages["stage1"].data.params["epochs"] == str(cfg.epochs) == "3"
    assert stages["stage2"].data.params["epochs"] == str(cfg.boost.epochs) == "1"
    annealed = float(stages["annealed"].data.params["optimizer.lr"])
    assert annealed == pytest.approx(cfg.optimizer.lr * cfg.boost.anneal_factor)
    assert float(stages["baseline"].data.params["optimizer.lr"]) == pytest.approx(cfg.optimizer.lr)
    # stage 2 trained boost.epochs: its last eval is at step 1 x steps per epoch
    per_epoch = int(stages["stage2"].data.tags["batch.steps_per_epoch"])
    assert per_epoch == 4  # 128 images, batch 32
    assert stages["stage1"].data.params["boost.rho"] == "0.4"


def test_the_validated_config_is_read_only(two_pipelines):
    (_, cfg), _ = two_pipelines
    with pytest.raises(ReadonlyConfigError):
        cfg.epochs = 7


def test_the_second_pipeline_reuses_stage1_and_every_baseline(launch, two_pipelines):
    first, second = pipeline_runs(launch)
    trained = {r.data.tags["stage"]: r.info.run_id for r in children_of(launch, first.info.run_id)}
    again = {r.data.tags["stage"] for r in children_of(launch, second.info.run_id)}
    # nothing else trained twice; the budget arm again only when stage 2 cost another budget
    budgets = [by_name(launch, run, "budget").data.tags["budget.steps"] for run in (first, second)]
    assert again == {"stage2"} | ({"budget"} if budgets[0] != budgets[1] else set())
    tags = second.data.tags
    for stage in ("stage1", "baseline", "annealed", "snapshot_mean"):
        assert tags[f"{stage}_reused_from"] == trained[stage]
        assert second.data.metrics[f"val/{stage}/acc"] == pytest.approx(
            first.data.metrics[f"val/{stage}/acc"]
        )
    assert tags["pca_basis_run"] == trained["stage1"]
    # the reused stage 1's curve is the same epochs as the first job's own
    client_curve = curve_of(launch, first.info.run_id, "curve/stage1")
    assert curve_of(launch, second.info.run_id, "curve/stage1") == client_curve
    assert [step for step, _ in client_curve] == [1, 2, 3]


def test_a_reuse_turn_waits_for_the_store_only_when_it_trained(launch, two_pipelines):
    """A turn that trains waits until the store has its run, so the next job can find it; a
    job whose stage 1 and baselines are all reused passes each turn at once (before, each
    turn waited for the writer: about 0.2 s a turn, 4 turns in every job of a sweep)."""
    assert sorted(WAITED["a"]) == ["annealed", "baseline", "budget", "snapshot_mean", "stage1"]
    assert WAITED["b"] in ([], ["budget"])  # the budget arm: when stage 2 cost another budget
    second = pipeline_runs(launch)[-1]
    assert all(second.data.tags[f"{s}_reused_from"] for s in ("stage1", "baseline"))


def test_the_comparison_pairs_stage2_with_the_reused_stages_on_the_same_images(
    launch, two_pipelines
):
    from sporeflow.report.paired import compare_paired

    _, second = pipeline_runs(launch)
    run_dir = launch / "b"
    stage2 = np.load(run_dir / "stage2" / "predictions.npy")
    stage1 = np.load(launch / "a" / "stage1" / "predictions.npy")
    expected = compare_paired(stage2, stage1)
    assert second.data.metrics["val/vs_stage1/images"] == expected.images
    assert second.data.metrics["val/vs_stage1/p_value"] == pytest.approx(expected.p_value)


def by_name(launch, pipeline, stage):
    """A pipeline's stage run: its child, or the run it reused."""
    reused = pipeline.data.tags.get(f"{stage}_reused_from")
    runs = runs_of(launch)
    if reused:
        return next(r for r in runs if r.info.run_id == reused)
    return next(
        r for r in children_of(launch, pipeline.info.run_id) if r.data.tags["stage"] == stage
    )


def test_every_arm_logs_what_it_spent_and_stage2_counts_its_trial_forwards(launch, two_pipelines):
    first = pipeline_runs(launch)[0]
    per_epoch = 4  # 128 images, batch 32
    for stage, steps in (("stage1", 3 * per_epoch), ("stage2", per_epoch), ("baseline", per_epoch)):
        m = by_name(launch, first, stage).data.metrics
        assert m["cost/steps"] == m["cost/backward_passes"] == m["cost/optimizer_steps"] == steps
        assert m["cost/images"] == 32 * steps
        assert min(m[f"cost/{k}_seconds"] for k in ("compile", "step", "eval")) >= 0
        trials = m["cost/forward_passes"] - steps  # stage 2's line search: 1 or 2 a step
        assert (steps <= trials <= 2 * steps) if stage == "stage2" else trials == 0
        overhead = m.get("cost/overhead_passes", 0.0)  # stage 2: snapshots and PCA, by rule
        assert (overhead > 0) if stage == "stage2" else overhead == 0
        assert m["cost/passes"] == pytest.approx(steps + trials / 3 + overhead)
        # one name, one meaning: the parent's <arm>/passes is the arm's run's cost/passes
        assert first.data.metrics[f"{stage}/passes"] == pytest.approx(m["cost/passes"])
    assert by_name(launch, first, "stage1").data.metrics["cost/snapshot_seconds"] > 0


def test_the_budget_arm_trains_what_stage2_cost_and_the_verdict_pairs_them(launch, two_pipelines):
    from sporeflow.report.paired import compare_paired

    first = pipeline_runs(launch)[0]
    budget = by_name(launch, first, "budget")
    tags, m = budget.data.tags, first.data.metrics
    assert tags["budget.unit"] == "passes"
    steps = int(tags["budget.steps"])
    # within one step of stage 2's passes, snapshots and PCA included (by the rule: 12
    # snapshots of the MLP's weights, k = 8, its forward MACs, batch 32)
    overhead = Overhead(12, 8, int(tags["budget.overhead.params"]), 64 * 16 + 16 * 16 + 16 * 10, 32)
    assert int(tags["budget.overhead.params"]) == 64 * 16 + 16 + 16 * 16 + 16 + 16 * 10 + 10
    assert float(tags["budget.overhead_passes"]) == pytest.approx(overhead.passes, abs=1e-3)
    stage2 = by_name(launch, first, "stage2").data.metrics
    assert stage2["cost/overhead_passes"] == pytest.approx(overhead.passes)
    # stage 2's run's cost/passes, the parent's stage2/passes and the budget: one quantity
    assert float(tags["budget.passes"]) == pytest.approx(stage2["cost/passes"], abs=2e-3)
    assert m["stage2/passes"] == pytest.approx(stage2["cost/passes"])
    assert m["budget_given/passes"] == pytest.approx(stage2["cost/passes"], abs=2e-3)
    assert steps == round(stage2["cost/passes"])
    assert budget.data.metrics["cost/steps"] == budget.data.metrics["cost/passes"] == steps
    assert m["budget/passes"] == steps
    # the verdict at equal cost: the gain's paired statistics, on stage 2 and the budget arm
    run_dir = launch / "a"
    expected = compare_paired(
        np.load(run_dir / "stage2" / "predictions.npy"),
        np.load(run_dir / "budget" / "predictions.npy"),
    )
    assert m["val/gain_at_cost_images"] == expected.images
    assert m["val/gain_at_cost_p_value"] == pytest.approx(expected.p_value)
    assert m["val/gain_at_cost"] == pytest.approx(m["val/stage2/acc"] - m["val/budget/acc"])
    # the equal-epoch gain leaves the budget arm out: it is stage 2 against the best other
    best = max(m[f"val/{b}/acc"] for b in ("baseline", "annealed", "snapshot_mean"))
    assert m["val/gain"] == pytest.approx(m["val/stage2/acc"] - best)
    # its curve on the parent: from stage 1's end (0 passes) to its own passes
    curve = curve_of(launch, first.info.run_id, "cost_curve/budget")
    assert curve[0] == (0, pytest.approx(m["val/stage1/acc"])) and curve[-1][0] == steps
    assert curve[-1][1] == pytest.approx(m["val/budget/acc"])


def test_the_budget_arm_rate_decays_linearly_to_zero_over_its_steps(two_pipelines):
    """The optimizer the budget arm trains with holds, per global step, optimizer.lr x (1 -
    t / T) for its T steps (Budgeted Training), whatever the configured schedule."""
    from omegaconf import OmegaConf

    from sporeflow.config.validation import validate
    from sporeflow.job.budget import Budget
    from sporeflow.job.specs import budget_spec
    from sporeflow.stage.build import build_stage_parts

    cfg = compose_job([*TINY_PIPELINE, "optimizer.schedule.name=cosine"])
    steps, per_epoch = 7, 4
    overhead = Overhead(12, 8, 1482, 1440, 32)
    given = Budget("passes", 6.9, overhead, 1.0, 0.01, 0.03, steps, per_epoch, 1)
    spec = budget_spec(cfg, Path("/nonexistent"), None, {}, given)
    assert spec.epochs == 2 and spec.max_steps == steps
    valid = validate(cfg)  # what a job's plan holds: the config and its typed twin
    parts = build_stage_parts(valid, OmegaConf.to_object(valid), spec, per_epoch)
    schedule = parts.state_cells[-1].learning_rate  # what the optimizer asks per global step
    held = np.array([float(schedule(Tensor(t, ms.int32)).asnumpy()) for t in range(2 * per_epoch)])
    t = np.arange(steps)
    np.testing.assert_allclose(held[:steps], cfg.optimizer.lr * (1 - t / steps), rtol=1e-6)
    assert (held[steps:] == 0).all()


def curve_of(launch, run_id, key):
    from helpers.store import client_of

    return [(m.step, m.value) for m in client_of(launch).get_metric_history(run_id, key)]


def test_a_plain_job_is_one_spec_in_its_own_run(launch):
    value, cfg = run_job(compose_job, launch, [*TINY, "epochs=2"], run="plain")
    runs = [r for r in runs_of(launch) if r.data.tags.get("run_dir") == str(launch / "plain")]
    assert len(runs) == 1 and runs[0].data.tags["stage"] == "train"
    assert runs[0].info.status == "FINISHED"
    assert value == pytest.approx(runs[0].data.metrics["final/val/acc"])
    assert (launch / "plain" / "checkpoints" / "final.ckpt").is_file()


def test_eval_curve_numbers_evaluations_by_their_epoch(launch):
    """callbacks.eval_every_n_epochs=2 over 4 epochs: evaluations after epochs 2 and 4."""
    run_job(
        compose_job, launch, [*TINY, "epochs=4", "callbacks.eval_every_n_epochs=2"], run="every2"
    )
    run = next(r for r in runs_of(launch) if r.data.tags.get("run_dir") == str(launch / "every2"))
    from sporeflow.tracking.store_reads import StoreReads

    reads = StoreReads.at(None, "sporeflow", launch)
    assert [epoch for epoch, _ in reuse.eval_curve(reads, run)] == [2, 4]
    # a run recorded before the steps-per-epoch tag: the same from its epochs and last step
    del run.data.tags["batch.steps_per_epoch"]
    assert [epoch for epoch, _ in reuse.eval_curve(reads, run)] == [2, 4]


def test_sporeflow_compare_lists_each_pipeline_and_each_configuration(
    launch, two_pipelines, capsys
):
    from sporeflow.entry import cli

    uri = f"sqlite:///{launch / 'mlflow.db'}"
    assert cli.main(["compare", "--uri", uri]) == 0
    out = capsys.readouterr().out.splitlines()
    runs = {r.info.run_id: r for r in pipeline_runs(launch)}
    rows, answers = out[:3], out[3:]  # the table, then each pipeline's one-line answer
    assert rows[0].split()[:3] == ["run", "id", "status"]
    for row in rows[1:]:
        run = runs[row.split()[0]]
        assert row.split()[2] == f"{run.data.metrics['test/stage1/acc']:.4f}"  # reported
        assert row.split()[3] == f"{run.data.metrics['test/stage2/acc']:.4f}"
    assert sorted(line.split(":")[0] for line in answers) == sorted(runs)
    assert all(": answer (test images): stage 2 vs stage1 " in line for line in answers), answers
    assert cli.main(["compare", "--uri", uri, "--seeds"]) == 0
    rows = capsys.readouterr().out.splitlines()
    # one seed each, two configurations (rho differs): sd 0 and the run's own value as the mean
    assert len(rows) == 3 and all(row.split()[0] == "1" for row in rows[1:])
    assert {row.split("  ")[-1].strip().split()[-1] for row in rows[1:]} == {
        "boost.rho=0.4",
        "boost.rho=0.7",
    }


def test_a_stage1_of_other_data_with_the_same_config_is_not_reused_and_the_log_says_why(
    idx_dir, tmp_path, caplog, monkeypatch
):
    """One pixel of the test images changed on disk, the config unchanged: stage 1 and the
    baseline run again (a reused stage 1 would be measured against other images), and the
    log names the run it did not reuse and its data digest against this job's."""
    import gzip
    import logging

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    overrides = [
        "dataset=fashion_mnist",
        f"dataset.root={idx_dir}",
        f"dataset.cache_dir={tmp_path / 'cache'}",
        "dataset.image_size=8",
        "model=mlp",
        "model.hidden=16",
        "callbacks.progress_bar=false",
        "debug=dim_reduce",
        "boost.baselines=[snapshot_mean]",  # one untrained baseline: the test stays short
    ]
    run_job(compose_job, tmp_path, overrides, run="a")
    images = idx_dir / "t10k-images-idx3-ubyte.gz"
    raw = bytearray(gzip.decompress(images.read_bytes()))
    raw[-1] ^= 0xFF
    images.write_bytes(gzip.compress(bytes(raw)))
    with caplog.at_level(logging.INFO, logger="sporeflow"):
        run_job(compose_job, tmp_path, overrides, run="b")
    stages = by_stage(runs_of(tmp_path))
    assert len(stages["stage1"]) == 2 and len(stages["snapshot_mean"]) == 2
    first = min(stages["stage1"], key=lambda r: r.info.start_time)
    (why,) = [r.getMessage() for r in caplog.records if "not reusing" in r.getMessage()][:1]
    assert why.startswith(
        f"stage1: not reusing MLflow run {first.info.run_id} (same config): data "
    )
    assert "code" not in why and "mindspore" not in why
    assert first.data.tags["provenance.mindspore"] == __import__("mindspore").__version__


class StoreThatDropsLooks:
    """A shared store's answers to the wait's looks, in order (None: the look was not answered,
    as when a loaded `mlflow server` resets the connection)."""

    shared = True

    def __init__(self, answers):
        self.answers, self.looks = list(answers), 0

    def search_runs_if_read(self, filter_string):
        self.looks += 1
        return self.answers.pop(0)

    def last_activity(self, run):
        import time

        return time.time()


def test_a_wait_for_another_machine_survives_looks_the_store_does_not_answer():
    """Machine b waits while a trains stage 1 on the team server; a look that fails (CI saw
    "Connection reset by peer") must not end the wait, or b trains stage 1 a second time."""
    from types import SimpleNamespace

    running = SimpleNamespace(info=SimpleNamespace(run_id="a-stage1"))
    store = StoreThatDropsLooks([[running], None, None, [running], None, []])
    reuse.wait_for_other_machines(store, "fingerprint.stage1", "f00d", "stage1", poll_s=0)
    assert store.looks == 6 and store.answers == []  # waited through both failed looks
    nobody_seen = StoreThatDropsLooks([None, [running], []])
    reuse.wait_for_other_machines(nobody_seen, "fingerprint.stage1", "f00d", "stage1", poll_s=0)
    assert nobody_seen.looks == 1  # no run seen yet: an unanswered look trains it here
    gone = StoreThatDropsLooks([[running]] + [None] * (reuse.UNREAD_PATIENCE + 1) + [[running]])
    reuse.wait_for_other_machines(gone, "fingerprint.stage1", "f00d", "stage1", poll_s=0)
    assert gone.looks == reuse.UNREAD_PATIENCE + 2  # a store that stays away ends the wait


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def test_a_local_stage1_whose_files_are_not_the_recorded_ones_is_trained_again(
    tmp_path, monkeypatch, caplog
):
    """Bytes flipped in a finished stage 1's final weights, then in its PCA basis: the next
    job in the same launch dir checks each file against the SHA-256 its run recorded, trains
    stage 1 again instead of reusing it, and says which file and why."""
    import logging

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    caplog.set_level(logging.WARNING, logger="sporeflow.job.reuse")
    base = [*TINY_PIPELINE, "boost.baselines=[baseline]"]
    run_job(compose_job, tmp_path, [*base, "boost.rho=0.4"], run="a")
    flip_a_byte(tmp_path / "a" / "stage1" / "checkpoints" / "final.ckpt")
    run_job(compose_job, tmp_path, [*base, "boost.rho=0.5"], run="b")
    (basis,) = (tmp_path / "b" / "stage1" / "pca").glob("*.npy")
    flip_a_byte(basis)
    shutil.rmtree(tmp_path / "a" / "baseline")  # the baseline's run dir is gone: trained again
    run_job(compose_job, tmp_path, [*base, "boost.rho=0.6"], run="c")
    pipelines = pipeline_runs(tmp_path)
    assert [p.data.tags.get("stage1_reused_from") for p in pipelines] == [None, None, None]
    said = [r.getMessage() for r in caplog.records if "not reusing run" in r.getMessage()]
    assert any(
        "checkpoints/final.ckpt is not the file its run made (SHA-256 differs" in m for m in said
    ), said
    assert any(f"pca/{basis.name} is not the file its run made" in m for m in said), said
    # the baseline's own files were untouched: it is still reused from the first job; once its
    # run dir is gone it is trained again, so its paired comparison does not drop out
    assert pipelines[1].data.tags.get("baseline_reused_from")
    assert not pipelines[2].data.tags.get("baseline_reused_from")
    assert "val/vs_baseline/p_value" in pipelines[2].data.metrics
