"""sporeflow's compile cache across processes (engine.compile_cache): MindSpore's cache used only
where each entry is checked against the graph it stands for. Real processes: MindSpore fixes a
process's cache folder at its first compile, and the point is what a later process loads."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from test_mindspore_compile_cache import ONE_GRAPH

from helpers.store import by_stage, runs_of
from helpers.train import run_train

pytestmark = pytest.mark.e2e

CHECKED = ONE_GRAPH.replace(
    "ms.set_context(mode=ms.GRAPH_MODE)",
    "ms.set_context(mode=ms.GRAPH_MODE)\n"
    "from pathlib import Path\n"
    "from sporeflow.engine import compile_cache\n"
    "compile_cache.use(True, Path(sys.argv[2]))",
)


def computed(script, graph: str, cache) -> float:
    proc = subprocess.run(
        [sys.executable, str(script), graph, str(cache)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return float(proc.stdout.split()[-1])


def test_a_process_compiling_another_graph_at_an_index_is_not_handed_the_cached_one(tmp_path):
    """What MindSpore's own cache gets wrong (test_mindspore_compile_cache.py), through the
    checked cache: the second process's graph is compiled, not loaded."""
    script = tmp_path / "one_graph.py"
    script.write_text(CHECKED)
    assert computed(script, "add_one", tmp_path / "cache") == 4.0
    assert computed(script, "double", tmp_path / "cache") == 6.0
    assert computed(script, "add_one", tmp_path / "cache") == 4.0


OUTCOMES = ("final/val/acc", "final/val/loss", "test/acc_class_3", "val/loss", "train/loss")
JOB = ["debug=dim_reduce", "boost.baselines=[]", "tracking.log_model=false"]  # stage 1 and 2


def _job(tmp_path, name: str, rho: str, *cache: str) -> tuple[dict, dict, str]:
    """(stage 1's and stage 2's outcomes, their final weights, the output) of one
    dim-reduce job."""
    launch = tmp_path / name
    launch.mkdir()
    args = [*JOB, f"boost.rho={rho}", *cache]
    proc = run_train(args, launch, env={"MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    found = by_stage(runs_of(launch))
    metrics, weights = {}, {}
    for stage in ("stage1", "stage2"):
        run_metrics = found[stage][0].data.metrics
        metrics.update({f"{stage}/{k}": run_metrics[k] for k in OUTCOMES})
        final = ms.load_checkpoint(str(launch / "run" / stage / "checkpoints" / "final.ckpt"))
        weights.update({f"{stage}/{k}": v.asnumpy() for k, v in final.items()})
    return metrics, weights, proc.stdout + proc.stderr  # Hydra logs to stdout


def _loaded(stderr: str) -> tuple[int, int]:
    found = re.findall(r"compile cache: (\d+) of (\d+) graphs loaded", stderr)
    assert found, stderr[-3000:]
    return int(found[-1][0]), int(found[-1][1])


def test_a_job_on_another_jobs_cache_ends_as_it_does_uncached(tmp_path):
    """Two processes with another `boost.rho` on one cache folder: the second loads the first's
    graphs (rho is a graph input: the same graph) and ends with the metrics and stage-2 weights,
    bit for bit, of the same job run without the cache. Then the second entry is corrupted: the
    next process loads the first, compiles the damaged one again - and every later one, since
    MindSpore stops reading its cache at a process's first entry it does not find - and still
    ends the same."""
    cache = f"runtime.compile_cache_dir={tmp_path / 'cache'}"
    _job(tmp_path, "first", "0.4", cache)
    metrics, weights, stderr = _job(tmp_path, "second", "0.7", cache)
    loaded, compiled = _loaded(stderr)
    assert loaded == compiled > 0, stderr[-3000:]
    expected_metrics, expected_weights, _ = _job(
        tmp_path, "uncached", "0.7", "runtime.compile_cache=false"
    )
    _assert_same(metrics, weights, expected_metrics, expected_weights)

    (manifest,) = (tmp_path / "cache").rglob("sporeflow-manifest.json")
    entry = json.loads(manifest.read_text())["1"]
    damaged = manifest.parent / next(iter(entry["files"]))
    damaged.write_bytes(damaged.read_bytes()[:-64] + bytes(64))
    metrics, weights, stderr = _job(tmp_path, "after_damage", "0.7", cache)
    assert _loaded(stderr) == (1, compiled), stderr[-3000:]
    _assert_same(metrics, weights, expected_metrics, expected_weights)


def _assert_same(metrics, weights, expected_metrics, expected_weights) -> None:
    assert metrics == expected_metrics
    assert weights.keys() == expected_weights.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, expected_weights[name], err_msg=name)
