"""sporeflow's compile cache across processes (engine.compile_cache): entries kept by the graph's
description, each checked against it before MindSpore reads it, put at whatever index a process
compiles the graph. Real processes: MindSpore fixes a process's cache folder at its first
compile, and the point is what a later process loads."""

from __future__ import annotations

import re
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from test_mindspore_compile_cache import ONE_GRAPH

from helpers.store import by_stage, runs_of
from helpers.train import TESTS, run_train, train_command

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


SEVERAL = CHECKED.replace(
    'net = AddOne() if sys.argv[1] == "add_one" else Double()\n'
    "print(net(ms.Tensor(np.array([3.0], np.float32))).asnumpy()[0])",
    "x = ms.Tensor(np.array([3.0], np.float32))\n"
    "for name in sys.argv[1].split(','):\n"
    "    before = compile_cache.counts()[1]\n"
    "    net = AddOne() if name == 'add_one' else Double()\n"
    "    print(name, net(x).asnumpy()[0], compile_cache.counts()[1] - before)",
)


def test_mindspore_reads_the_cache_after_a_graph_it_compiles(tmp_path):
    """What the content store rests on (MindSpore 2.10): a process whose first graph is not in
    the cache still loads the later ones. MindSpore stops reading its cache at a missing file;
    sporeflow puts an empty file at a miss, which MindSpore compiles over and goes on."""
    script = tmp_path / "several.py"
    script.write_text(SEVERAL)

    def run(order: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, str(script), order, str(tmp_path / "cache")],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.split("\n")[:-1]

    assert run("add_one") == ["add_one 4.0 0"]
    assert run("double,add_one") == ["double 6.0 0", "add_one 4.0 1"]  # a miss, then a hit
    assert run("double,add_one") == ["double 6.0 1", "add_one 4.0 1"]


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
    bit for bit, of the same job run without the cache. Then one stored entry is corrupted: the
    next process compiles that graph again, loads every other one, and still ends the same."""
    cache = f"runtime.compile_cache_dir={tmp_path / 'cache'}"
    _job(tmp_path, "first", "0.4", cache)
    metrics, weights, stderr = _job(tmp_path, "second", "0.7", cache)
    loaded, compiled = _loaded(stderr)
    assert loaded == compiled > 0, stderr[-3000:]
    expected_metrics, expected_weights, _ = _job(
        tmp_path, "uncached", "0.7", "runtime.compile_cache=false"
    )
    _assert_same(metrics, weights, expected_metrics, expected_weights)

    entries = sorted((tmp_path / "cache").glob("*/graphs/*/entry.json"))
    assert len(entries) == compiled
    (damaged,) = (p for p in entries[0].parent.iterdir() if p.name != "entry.json")
    damaged.write_bytes(damaged.read_bytes()[:-64] + bytes(64))
    metrics, weights, stderr = _job(tmp_path, "after_damage", "0.7", cache)
    assert _loaded(stderr) == (compiled - 1, compiled), stderr[-3000:]
    _assert_same(metrics, weights, expected_metrics, expected_weights)


def _assert_same(metrics, weights, expected_metrics, expected_weights) -> None:
    assert metrics == expected_metrics
    assert weights.keys() == expected_weights.keys()
    for name, value in weights.items():
        np.testing.assert_array_equal(value, expected_weights[name], err_msg=name)


QUICK = ["debug=quick", "tracking.log_model=false"]  # 1 epoch of LeNet-5 on the digits


def _quick(tmp_path, name: str, *args: str) -> tuple[tuple[int, int], dict, dict]:
    """((graphs loaded, compiled), final metrics, final weights) of one `debug=quick` job."""
    launch = tmp_path / name
    launch.mkdir()
    proc = run_train([*QUICK, *args], launch, env={"MLFLOW_TRACKING_URI": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return _quick_outcome(launch, proc.stdout + proc.stderr, "runtime.compile_cache=false" in args)


def _quick_outcome(launch, output: str, uncached: bool) -> tuple[tuple[int, int], dict, dict]:
    (run,) = runs_of(launch)
    metrics = {
        k: v
        for k, v in run.data.metrics.items()
        if k.startswith(("final/", "test/")) and not re.search("sec|time|wall", k)  # not timings
    }
    final = ms.load_checkpoint(str(launch / "run" / "checkpoints" / "final.ckpt"))
    weights = {k: v.asnumpy() for k, v in final.items()}
    return ((0, 0) if uncached else _loaded(output)), metrics, weights


def test_the_job_run_before_another_loads_all_its_graphs(tmp_path):
    """Issue 64 as a user iterating: `train.py`, `train.py optimizer=adam`, `train.py` in a fresh
    cache folder (one slot: each ended before the next). The third loads every graph of its
    own, though adam's graphs were compiled since at the same indexes, and ends bit for bit as
    the job without the cache."""
    cache = f"runtime.compile_cache_dir={tmp_path / 'cache'}"
    (loaded, compiled), *_ = _quick(tmp_path, "first", cache)
    assert loaded == 0 and compiled > 0
    (loaded, adam), *_ = _quick(tmp_path, "adam", cache, "optimizer=adam")
    assert loaded < adam  # its training graph is its own
    found, metrics, weights = _quick(tmp_path, "third", cache)
    assert found == (compiled, compiled)
    _, expected_metrics, expected_weights = _quick(
        tmp_path, "uncached", "runtime.compile_cache=false"
    )
    _assert_same(metrics, weights, expected_metrics, expected_weights)


def test_two_jobs_started_together_both_load_theirs_from_the_cache(tmp_path):
    """Two different jobs (momentum, adam) started at once fill a fresh cache folder, each in a
    slot of its own; started together again, in the other order, each loads all its graphs,
    whatever slot it takes now."""
    cache = f"runtime.compile_cache_dir={tmp_path / 'cache'}"

    def together(round_: str, *jobs: tuple[str, ...]) -> list[tuple[int, int]]:
        started = []
        for n, args in enumerate(jobs):
            launch = tmp_path / f"{round_}-{n}"
            launch.mkdir()
            cmd, env = train_command(
                [*QUICK, cache, *args], launch, env={"MLFLOW_TRACKING_URI": ""}
            )
            started.append(
                (
                    launch,
                    subprocess.Popen(
                        cmd,
                        cwd=launch,
                        env=env,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT,
                        text=True,
                    ),
                )
            )
        found = []
        for launch, proc in started:
            output, _ = proc.communicate(timeout=600)
            assert proc.returncode == 0, output[-3000:]
            found.append(_quick_outcome(launch, output, uncached=False)[0])
        return found

    momentum, adam = together("cold", (), ("optimizer=adam",))
    assert momentum[0] + adam[0] <= momentum[1]  # at most the shared evaluation graphs
    assert together("warm", ("optimizer=adam",), ()) == [(adam[1], adam[1]), (momentum[1],) * 2]
    assert len(list((tmp_path / "cache").glob("*/slot-*"))) == 2


CONSTANTS = """
import sys
from pathlib import Path
import numpy as np
import mindspore as ms

sys.path.insert(0, sys.argv[3])
ms.set_context(mode=ms.GRAPH_MODE)
from sporeflow.engine import compile_cache
from helpers.constant_nets import KINDS, Scaled

compile_cache.use(True, Path(sys.argv[2]))
x = ms.Tensor(np.array([[3.0, -2.0]], np.float32))
for kind in KINDS:
    before = compile_cache.counts()[1]
    out = Scaled(kind, float(sys.argv[1]))(x).asnumpy().ravel().tolist()
    print(kind, out, compile_cache.counts()[1] - before)
"""


def test_a_network_holding_another_constant_is_not_handed_the_cached_graph(tmp_path):
    """Issue 75: a network holding np.float32(1), then in the next process one holding
    np.float32(0), on one cache folder: the second loaded the first one's graph (its
    description reduced the constant to its type). Now, for a constant of each kind
    (helpers.constant_nets), the second process computes what it computes on an empty cache;
    the first value, run again, loads its own graphs, but a plain object's (never cached)."""
    script = tmp_path / "constants.py"
    script.write_text(CONSTANTS)

    def run(scale: str, cache: str) -> list[str]:
        proc = subprocess.run(
            [sys.executable, str(script), scale, str(tmp_path / cache), str(TESTS)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        return proc.stdout.splitlines()

    alone = run("0.0", "empty")
    first = run("1.0", "cache")
    assert run("0.0", "cache") == alone
    again = run("1.0", "cache")
    assert [line.rsplit(" ", 1)[0] for line in again] == [line.rsplit(" ", 1)[0] for line in first]
    versions = sorted(p.name for p in (tmp_path / "cache").iterdir() if p.is_dir())
    assert [line.rsplit(" ", 1)[1] for line in again] == [
        "0" if line.startswith("object") else "1" for line in again
    ], versions  # more than one: sporeflow's source changed while the test ran


def test_a_job_of_a_network_holding_another_constant_ends_as_it_does_alone(tmp_path):
    """The issue's jobs one after the other on one cache folder: a user network holding
    `np.float32(scale)`, scale 1 then scale 0. The second loaded all 4 of the first one's
    graphs and reported its accuracy; now it ends, bit for bit, as it does without the cache."""
    cache = f"runtime.compile_cache_dir={tmp_path / 'cache'}"
    scaled = ["model=mlp", "model.hidden=16", "model._target_=helpers.constant_nets.ScaledMLP"]

    def job(name: str, scale: str, *args: str) -> tuple[tuple[int, int], dict, dict]:
        launch = tmp_path / name
        launch.mkdir()
        env = {"MLFLOW_TRACKING_URI": "", "PYTHONPATH": str(TESTS)}  # helpers.constant_nets
        proc = run_train([*QUICK, *scaled, f"+model.scale={scale}", *args], launch, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        uncached = "runtime.compile_cache=false" in args
        return _quick_outcome(launch, proc.stdout + proc.stderr, uncached)

    (_, compiled), one_metrics, _ = job("one", "1.0", cache)
    (loaded, _), metrics, weights = job("zero", "0.0", cache)
    assert loaded < compiled  # the graphs that hold the scale are its own
    _, expected_metrics, expected_weights = job("alone", "0.0", "runtime.compile_cache=false")
    _assert_same(metrics, weights, expected_metrics, expected_weights)
    assert one_metrics != expected_metrics
