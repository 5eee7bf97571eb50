"""The job plan (issue 49): what the entry resolves once, on real compositions and real run
dirs: the facts every layer reads, `resume=` on this node and node 0's, the kind of job a run
dir holds, and a SLURM requeue's continuation."""

from __future__ import annotations

import pytest

from helpers.inprocess import TINY, TINY_PIPELINE, context
from sporeflow.config.facts import first_local_rank, global_batch_size, worker_batch_size
from sporeflow.core.errors import ConfigError
from sporeflow.entry.python_api import compose
from sporeflow.job.plan import plan_job
from sporeflow.storage.run_marker import PIPELINE, write_run_marker


def job_dir(launch, name: str, stage: str) -> str:
    """A run dir as a job leaves it: its marker, and a plain run's checkpoints/ folder."""
    folder = launch / name
    (folder / "checkpoints").mkdir(parents=True)
    write_run_marker(folder, mlflow_run_id="0" * 32, stage=stage)
    return str(folder)


@pytest.mark.parametrize(
    "overrides",
    [
        [*TINY, "dataset.batch_size=32"],
        [*TINY, "parallel=data2", "dataset.batch_size=32", "sweep.objective=loss"],
        [*TINY_PIPELINE, "parallel=data2", "parallel.per_worker_batch=true"],
    ],
)
def test_a_new_job_plans_its_own_dir_and_the_facts_config_facts_derive(tmp_path, overrides):
    cfg = compose(overrides)
    plan = plan_job(cfg, context(tmp_path, overrides))
    assert plan.resume is None and plan.requeues == 0
    assert plan.home == plan.node0_home == tmp_path / "run"
    assert plan.dim_reduce == (cfg.boost.name.value == "dim_reduce") == (plan.pipeline != "none")
    assert plan.worker_batch == worker_batch_size(cfg)
    assert plan.global_batch == global_batch_size(cfg) == plan.worker_batch * cfg.parallel.workers
    assert plan.first_local_rank == first_local_rank(cfg) == 0
    explicit = cfg.sweep.objective if cfg.sweep.objective != "auto" else None
    named = f"val/{explicit}" if explicit and not explicit.startswith("val/") else explicit
    assert plan.objective == (named or ("val/stage2/acc" if plan.dim_reduce else "val/acc"))
    assert plan.run.boost.name is cfg.boost.name  # the typed twin holds the same values


def test_a_pipelines_cost_passes_plans_its_stage2_passes(tmp_path):
    """The issue's `sweep.objective=[val/stage2/acc,cost/passes]` on a pipeline: the job
    returns (and the sweep reads) the parent's `stage2/passes`; a plain job keeps its own."""
    listed = "sweep.objective=[val/stage2/acc,cost/passes]"
    plan = plan_job(compose([*TINY_PIPELINE, listed]), context(tmp_path, [listed]))
    assert (plan.objective, plan.cost) == ("val/stage2/acc", "stage2/passes")
    plain = [*TINY, "sweep.objective=[val/acc,cost/passes]"]
    plan = plan_job(compose(plain), context(tmp_path / "plain", plain))
    assert (plan.objective, plan.cost) == ("val/acc", "cost/passes")


def test_resume_names_the_dir_each_node_continues_and_node_0s(tmp_path):
    """Node 1 of a pipeline continues its own `<job>_node1`, whose markers are node 0's."""
    node0 = job_dir(tmp_path, "7", PIPELINE)
    node1 = tmp_path / "7_node1"
    node1.mkdir()
    overrides = [*TINY_PIPELINE, "parallel=data2", "parallel.nodes=2", "parallel.node_rank=1"]
    plan = plan_job(compose([*overrides, f"resume={node1}"]), context(tmp_path, overrides))
    assert plan.resume is not None and plan.resume.pipeline
    assert (plan.home, plan.node0_home) == (node1.resolve(), tmp_path / "7")
    assert str(plan.node0_home) == node0


@pytest.mark.parametrize(
    "job, stage, said",
    [
        (
            TINY,
            PIPELINE,
            "is a dim-reduce pipeline's dir; continue it with its own boost=dim_reduce",
        ),
        (TINY_PIPELINE, "train", "is a plain run's dir; a boost=dim_reduce job continues only"),
    ],
)
def test_a_run_dir_of_the_other_kind_of_job_is_refused_naming_resume(tmp_path, job, stage, said):
    folder = job_dir(tmp_path, "old", stage)
    with pytest.raises(ConfigError) as refused:
        plan_job(compose([*job, f"resume={folder}"]), context(tmp_path, job))
    assert str(refused.value).startswith(f"resume={folder}: {folder} ")
    assert said in str(refused.value)


def test_a_resume_that_names_no_run_dir_is_refused_naming_resume(tmp_path):
    with pytest.raises(ConfigError, match=r"^resume=true: no sporeflow run under "):
        plan_job(compose([*TINY, "resume=true"]), context(tmp_path, TINY))


def test_a_requeued_job_continues_its_own_dir_once_its_run_is_marked(tmp_path):
    """SLURM's restart count alone is not enough: the run dir must hold the job's run."""
    unmarked = plan_job(compose(TINY), context(tmp_path, TINY), requeues=2)
    assert unmarked.resume is None and unmarked.requeues == 0 and not unmarked.cfg.resume
    job_dir(tmp_path, "run", "train")
    plan = plan_job(compose(TINY), context(tmp_path, TINY), requeues=2)
    assert plan.requeues == 2 and plan.cfg.resume == str(tmp_path / "run")  # what msrun passes
    assert plan.resume is not None and plan.home == (tmp_path / "run").resolve()
    explicit = plan_job(compose([*TINY, "resume=false"]), context(tmp_path, TINY), requeues=0)
    assert explicit.resume is None


def test_settings_the_job_will_not_use_are_planned_once(tmp_path):
    overrides = [*TINY, "boost.rho=0.4", "train.ema.decay=0.9"]
    plan = plan_job(compose(overrides), context(tmp_path, overrides))
    assert plan.unused == (
        "boost.rho=0.4 has no effect: boost=none (it is a setting of boost=dim_reduce)",
        "train.ema.decay=0.9 has no effect while train.ema.enabled=false",
    )
